"""KernelBench's own harness on one (problem, answer): ``eval_kernel_against_ref`` at the pinned revision, in a fresh
process, as KernelBench's scripts run it (5 correctness trials, 100 timed trials, CUDA events, backend triton).
For side-by-side numbers only (bench/gpu_problem_worker.py); the KernelBench source is fetched, copied to an ignored
folder for the device run (.kb/kbsrc/kernelbench) and never committed.

KernelBench's package ``__init__`` imports its LLM-query helpers (openai, litellm, dotenv), which evaluation never
calls; those three modules are stubbed here so only what ``eval.py`` runs is real. ``pydantic`` and ``requests``
(imported by eval.py) come from carried wheels.

    python bench/kernelbench_harness.py --kb-src .kb/kbsrc --problem P.py --answer A.py   # prints one JSON line

With ``--baseline`` instead of ``--answer``: KernelBench's eager baseline of the problem
(``timing.measure_ref_program_time``: seed 42, under ``torch.no_grad()``, 5 warm-up and 100 timed trials, CUDA events),
the time its published speedups divide by; prints its statistics as one JSON line. ``--compile`` adds
``use_torch_compile=True, torch_compile_options="max-autotune"``: its torch.compile baseline (the compile happens in
the timing function's warm-up, as KernelBench runs it).

``--gpu-lock FILE``: several of these processes on one GPU, as a capable user drives KernelBench's harness (issue
34's comparison, bench/dag_vs_kernelbench.py): every call of KernelBench's timing function (``timing.get_timing_function``,
which both ``eval_kernel_against_ref`` and ``measure_ref_program_time`` go through) holds an exclusive ``flock`` on
FILE, so timing is alone on the GPU while loading, input building and correctness run side by side.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

T0 = time.monotonic()


def _stub_llm_clients() -> None:
    for name, attrs in {"dotenv": {"load_dotenv": lambda *a, **k: None},
                        "openai": {"OpenAI": object}, "litellm": {"completion": None}}.items():
        if name not in sys.modules:
            module = types.ModuleType(name)
            for key, value in attrs.items():
                setattr(module, key, value)
            sys.modules[name] = module


def run_in_process(kb_src: Path, problem: Path, answer: Path | None, timeout_s: float, *extra: str) -> dict:
    """This script on one (problem, answer) in a fresh process (``answer`` None: ``extra`` says which baseline,
    e.g. ``--baseline --compile``): its JSON record, with ``error`` (the output's tail) and ``returncode`` added when
    it holds no verdict (it crashed, or KernelBench returned none). Raises ``subprocess.TimeoutExpired`` after
    ``timeout_s``."""
    which = ["--answer", str(answer)] if answer is not None else []
    proc = subprocess.run([sys.executable, __file__, "--kb-src", str(kb_src), "--problem", str(problem), *which,
                           *extra], capture_output=True, text=True, timeout=timeout_s)
    try:
        record = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        record = {}
    if record.get("compiled") is None and record.get("mean") is None:  # no verdict, no baseline's statistics
        record.update(error=(proc.stderr or proc.stdout)[-800:], returncode=proc.returncode)
    return record


def _lock_timing(kb_timing: types.ModuleType, lock_file: Path) -> None:
    """KernelBench's timing functions, each call under an exclusive flock on ``lock_file``."""
    pick = kb_timing.get_timing_function

    def locked_timing_function(*args, **kwargs):
        timing_fn = pick(*args, **kwargs)

        def locked(*a, **k):
            with open(lock_file, "a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
                return timing_fn(*a, **k)
        return locked

    kb_timing.get_timing_function = locked_timing_function


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb-src", type=Path, required=True)
    parser.add_argument("--problem", type=Path, required=True)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--answer", type=Path)
    which.add_argument("--baseline", action="store_true", help="KernelBench's eager baseline of the problem")
    parser.add_argument("--compile", action="store_true", help="with --baseline: torch.compile max-autotune")
    parser.add_argument("--gpu-lock", type=Path, help="hold this file's exclusive flock while timing")
    args = parser.parse_args()
    _stub_llm_clients()
    sys.path.insert(0, str(args.kb_src))
    package = types.ModuleType("kernelbench")  # the package without its __init__ (the LLM clients)
    package.__path__ = [str(args.kb_src / "kernelbench")]
    sys.modules["kernelbench"] = package
    from kernelbench import timing as kb_timing  # noqa: E402

    if args.gpu_lock:
        _lock_timing(kb_timing, args.gpu_lock)
    if args.baseline:
        compiled = {"use_torch_compile": True, "torch_compile_options": "max-autotune"} if args.compile else {}
        stats = kb_timing.measure_ref_program_time(args.problem.stem, args.problem.read_text(), num_trials=100,
                                                   **compiled)
        if stats is None:  # KernelBench printed its error and returned nothing
            raise SystemExit("measure_ref_program_time returned no statistics")
        print(json.dumps(dict(stats, process_s=time.monotonic() - T0)))
        return
    from kernelbench import eval as kb_eval  # noqa: E402

    t_eval = time.monotonic()
    with tempfile.TemporaryDirectory() as build:
        result = kb_eval.eval_kernel_against_ref(
            args.problem.read_text(), args.answer.read_text(), seed_num=42, num_correct_trials=5,
            num_perf_trials=100, measure_performance=True, timing_method="cuda_event", build_dir=build,
            backend="triton", precision=kb_eval.torch.float32)
    record = {"compiled": getattr(result, "compiled", None), "correctness": getattr(result, "correctness", None),
              "runtime_ms": getattr(result, "runtime", None), "metadata": str(getattr(result, "metadata", ""))[:600],
              "eval_s": time.monotonic() - t_eval, "process_s": time.monotonic() - T0}
    print(json.dumps(record))


if __name__ == "__main__":
    main()
