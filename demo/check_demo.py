#!/usr/bin/env python
"""Developer tool: check the bundled demo completions against the demo suite.

Standalone (it does not use the pipeline's modules): for every model directory under demo/completions and
every problem under demo/suite/KernelBench/level*/, it takes the first fenced code block of the completion,
runs reference and answer in a child process (TRITON_INTERPRET=1 unless --device cuda, fresh temporary
directory, own process group, killed on timeout), and prints a verdict and the answer's time per forward. Verdicts use the names of
workflow_scripts/core/statuses.py. With --expected (default demo/expected_statuses.json) it also compares each
verdict with the intended one for --device and exits non-zero on any difference.

Protocol, as KernelBench's: torch.manual_seed(seed) before building each model, then `trials` input sets,
each generated after seeding with a per-trial seed, compared with torch.allclose(atol, rtol).

    .venv/bin/python demo/check_demo.py                  # everything
    .venv/bin/python demo/check_demo.py -m expert -p level2_1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULT_MARK = "@@CHECK_DEMO_RESULT@@"
FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def first_code_block(text: str) -> str | None:
    """The body of the first fenced code block (any language tag), or None."""
    m = FENCE_RE.search(text)
    return m.group(2) if m else None


def discover_problems(suite: Path) -> list[tuple[str, Path]]:
    out = []
    for level_dir in sorted((suite / "KernelBench").glob("level*")):
        level = int(level_dir.name[len("level"):])
        for f in level_dir.glob("*.py"):
            pid = int(f.name.split("_", 1)[0])
            out.append((level, pid, f"level{level}_{pid}", f))
    out.sort()
    return [(key, path) for _, _, key, path in out]


# ----------------------------------------------------------------------------------------------------------
# Child side
# ----------------------------------------------------------------------------------------------------------


def _load_module(name: str, path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _clone(xs):
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def _to(xs, device):
    import torch

    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in xs]


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def child_main(problem: Path, answer: Path, trials: int, seed: int, atol: float, rtol: float,
               device: str = "cpu") -> dict:
    import torch

    launches = [0]

    def count(cls):
        orig = cls.run

        def run(self, *a, **k):
            launches[0] += 1
            return orig(self, *a, **k)

        cls.run = run

    try:
        from triton.runtime.interpreter import InterpretedFunction

        count(InterpretedFunction)
    except Exception:
        pass
    try:
        from triton.runtime.jit import JITFunction

        count(JITFunction)
    except Exception:
        pass

    ref = _load_module("reference_problem", problem)
    src = answer.read_text()
    try:
        compile(src, str(answer), "exec")
    except SyntaxError as e:
        return {"status": "load_error", "error": f"SyntaxError: {e}"}
    try:
        ans = _load_module("answer_module", answer)
    except BaseException as e:  # noqa: BLE001
        return {"status": "load_error", "error": f"{type(e).__name__}: {e}"}
    if not isinstance(getattr(ans, "ModelNew", None), type):
        return {"status": "no_model_new", "error": "module defines no ModelNew class"}

    init_inputs = ref.get_init_inputs()
    torch.manual_seed(seed)
    model = ref.Model(*init_inputs).to(device)
    try:
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        new = ans.ModelNew(*init_inputs).to(device)
        init_s = time.perf_counter() - t0
    except BaseException as e:  # noqa: BLE001
        return {"status": "init_error", "error": f"{type(e).__name__}: {e}"}

    torch.manual_seed(seed)
    trial_seeds = [int(torch.randint(0, 2**31 - 1, (1,)).item()) for _ in range(trials)]
    ref_times, new_times, max_diff = [], [], 0.0
    with torch.no_grad():
        for s in trial_seeds:
            torch.manual_seed(s)
            inputs = _to(ref.get_inputs(), device)
            _sync(device)
            t0 = time.perf_counter()
            expected = model(*_clone(inputs))
            _sync(device)
            ref_times.append(time.perf_counter() - t0)
            try:
                t0 = time.perf_counter()
                got = new(*_clone(inputs))
                _sync(device)
                new_times.append(time.perf_counter() - t0)
            except BaseException as e:  # noqa: BLE001
                return {"status": "runtime_error", "error": f"{type(e).__name__}: {e}"}
            if not isinstance(got, torch.Tensor):
                return {"status": "runtime_error", "error": f"forward returned {type(got).__name__}"}
            if got.shape != expected.shape:
                return {"status": "shape_mismatch", "error": f"{tuple(got.shape)} != {tuple(expected.shape)}"}
            if got.dtype != expected.dtype:
                return {"status": "dtype_mismatch", "error": f"{got.dtype} != {expected.dtype}"}
            diff = (got.double() - expected.double()).abs().max().item() if got.numel() else 0.0
            max_diff = max(max_diff, diff if diff == diff else float("inf"))
            if not torch.allclose(got, expected, atol=atol, rtol=rtol):
                return {"status": "mismatch", "error": f"max_abs_diff={diff:.3g}", "max_abs_diff": diff}
    status = "correct" if launches[0] > 0 else "no_triton_launch"
    return {
        "status": status,
        "error": None,
        "max_abs_diff": max_diff,
        "launches": launches[0],
        "init_s": init_s,
        "first_forward_s": new_times[0],
        "forward_s": sum(new_times[1:]) / max(1, len(new_times) - 1),
        "ref_forward_s": sum(ref_times[1:]) / max(1, len(ref_times) - 1),
    }


# ----------------------------------------------------------------------------------------------------------
# Parent side
# ----------------------------------------------------------------------------------------------------------


def check_one(problem: Path, completion: Path, args) -> dict:
    if not completion.exists():
        return {"status": "missing_completion", "error": None}
    code = first_code_block(completion.read_text())
    if code is None:
        return {"status": "no_code", "error": None}
    with tempfile.TemporaryDirectory(prefix="check_demo_") as tmp:
        answer = Path(tmp) / "answer.py"
        answer.write_text(code)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        if args.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(problem.resolve()), str(answer),
               "--trials", str(args.trials), "--seed", str(args.seed), "--atol", str(args.atol),
               "--rtol", str(args.rtol), "--device", args.device]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"status": "timeout", "error": f"killed after {args.timeout}s", "wall_s": args.timeout}
        wall = time.perf_counter() - t0
    for line in out.splitlines():
        if line.startswith(RESULT_MARK):
            res = json.loads(line[len(RESULT_MARK):])
            res["wall_s"] = wall
            return res
    lines = [ln for ln in (err or "").splitlines() if ln.strip()]
    first = next((ln for ln in lines if "Fatal Python error" in ln), lines[-1] if lines else "")
    how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return {"status": "crash", "error": f"{how} {first.strip()[:200]}".strip(), "wall_s": wall}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", type=Path, default=HERE / "suite")
    p.add_argument("--completions", type=Path, default=HERE / "completions")
    p.add_argument("--expected", type=Path, default=HERE / "expected_statuses.json")
    p.add_argument("-m", "--model", action="append", help="model directory name (repeatable); default all")
    p.add_argument("-p", "--problem", action="append", help="problem key such as level1_3 (repeatable)")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda (real GPU Triton)")
    p.add_argument("--json", type=Path, help="also write all results here")
    p.add_argument("--child", nargs=2, metavar=("PROBLEM", "ANSWER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child:
        res = child_main(Path(args.child[0]), Path(args.child[1]), args.trials, args.seed, args.atol, args.rtol,
                         args.device)
        sys.stdout.flush()
        print(RESULT_MARK + json.dumps(res), flush=True)
        return 0

    problems = discover_problems(args.suite)
    if args.problem:
        problems = [(k, f) for k, f in problems if k in set(args.problem)]
    # The hostile model's answers attack the pipeline's evaluator (tests/test_pipeline_e2e.py checks its verdicts
    # there); this KernelBench-style harness has none of its defences, so they are left out unless asked for.
    models = args.model or sorted(d.name for d in args.completions.iterdir() if d.is_dir() and d.name != "hostile")
    expected = {}
    if args.expected and args.expected.is_file() and args.expected.stat().st_size:
        expected = json.loads(args.expected.read_text()).get(args.device, {})

    rows, unexpected = [], 0
    print(f"{'model':<10} {'problem':<10} {'verdict':<19} {'expected':<19} {'fwd_s':>7} {'first_s':>7} "
          f"{'ref_s':>8} {'wall_s':>6}  detail")
    for model in models:
        for key, path in problems:
            res = check_one(path, args.completions / model / f"{key}.txt", args)
            want = expected.get(model, {}).get(key)
            ok = want is None or want == res["status"]
            unexpected += not ok

            def fmt(v, w, d=3):
                return f"{v:>{w}.{d}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"

            detail = res.get("error") or f"launches={res.get('launches')} max_abs_diff={res.get('max_abs_diff', 0):.2g}"
            print(f"{model:<10} {key:<10} {res['status']:<19} {(want or '-') + ('' if ok else ' !!'):<19} "
                  f"{fmt(res.get('forward_s'), 7)} {fmt(res.get('first_forward_s'), 7)} "
                  f"{fmt(res.get('ref_forward_s'), 8, 5)} {fmt(res.get('wall_s'), 6, 1)}  {detail[:90]}",
                  flush=True)
            rows.append({"model": model, "problem": key, "expected": want, **res})

    timed = [r for r in rows if r.get("forward_s") is not None]
    if timed:
        slow = max(timed, key=lambda r: r["forward_s"])
        print(f"\nslowest answer forward: {slow['model']} {slow['problem']} {slow['forward_s']:.3f}s "
              f"(first call {slow['first_forward_s']:.3f}s)")
    print(f"{len(rows)} checked, {unexpected} differ from the expected verdict")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
