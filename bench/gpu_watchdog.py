"""The per-call watchdog on the GPU (issue: evaluator v2, done-when 5), and one multi-GB problem (done-when 1):

1. honest answers evaluated alone (status, runtime, wall time);
2. the same honest answers evaluated while an answer whose Triton kernel never returns (bench/spinning) runs beside
   them on the same GPU: how soon the spinner is killed, and whether the honest answers keep their verdicts and
   timings (their waits for the GPU do not count against their deadlines);
3. optionally, the reference-as-answer of a multi-GB level-1 problem (e.g. L1_19, 6 GiB of input).

    python bench/gpu_watchdog.py --suite .kb --honest L2_71 L1_12 --big L1_19 --out $OUT
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answer  # noqa: E402
from workflow_scripts.generation.replay import rename_reference_model  # noqa: E402

SPINNER = ROOT / "bench" / "spinning" / "answer.py"
ADD = ROOT / "tests" / "cheats" / "problems" / "1_ElementwiseAdd.py"


def append_record(path: Path, record: dict, shown: tuple[str, ...] | None = None) -> None:
    """One JSON line, appended as the run goes (a device call can be cut off), and echoed (only the ``shown`` keys,
    where a record is too long to read on the console)."""
    with open(path, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
    echoed = record if shown is None else {k: record.get(k) for k in shown}
    print(json.dumps(echoed, sort_keys=shown is None), flush=True)


def log(out: Path, record: dict) -> None:
    append_record(out / "gpu_watchdog.jsonl", record)


def problem_file(suite: Path, key: str) -> Path:
    level, pid = key[1:].split("_")
    return next((suite / "KernelBench" / f"level{level}").glob(f"{pid}_*.py"))


def evaluate(problem: Path, answer_source: str | None, answer_file: Path | None, out: Path, what: str, **kw) -> dict:
    config = EvalConfig(device="cuda", require_triton=False, run_static=False, lock_dir=str(out / "locks"), **kw)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        if answer_file is None:
            answer_file = Path(tmp) / "answer.py"
            answer_file.write_text(answer_source)
        result = evaluate_answer(problem, answer_file, config)
    record = {"what": what, "problem": problem.name, "status": result.status, "runtime_ms": result.runtime_ms,
              "wall_s": round(time.monotonic() - t0, 2), "error": (result.error or "")[:300],
              "phases": result.phases_s, "flags": result.flags}
    log(out, record)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--honest", nargs="+", default=["L2_71", "L1_12"])
    parser.add_argument("--big", nargs="*", default=[])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    honest = [(problem_file(args.suite, key), key) for key in args.honest]
    for problem, key in honest:
        evaluate(problem, rename_reference_model(problem.read_text()), None, args.out, f"alone {key}")
    with ThreadPoolExecutor(max_workers=1 + len(honest)) as pool:
        spinner = pool.submit(evaluate, ADD, None, SPINNER, args.out, "spinner beside")
        time.sleep(2.0)  # the spinner first, so the honest answers really run beside it
        beside = [pool.submit(evaluate, problem, rename_reference_model(problem.read_text()), None, args.out,
                              f"beside spinner {key}") for problem, key in honest]
        spinner.result()
        for future in beside:
            future.result()
    for key in args.big:
        problem = problem_file(args.suite, key)
        evaluate(problem, rename_reference_model(problem.read_text()), None, args.out, f"big {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
