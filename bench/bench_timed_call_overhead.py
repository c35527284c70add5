"""What one timed call costs beyond the answer's own work (issue: evaluator v2, done-when 4): the reference of a tiny
problem (64x128 add, microseconds) as its own answer, timed with ``--trials`` calls; the trusted side's observed
interval per timed call (from its reply to the next report: the call, the child's work after it, two messages) and
where the timing's seconds go. On the GPU the same loop also flushes the L2 and synchronises; this isolates the
harness's own per-call work, which the CPU shows as well.

    PYTHONPATH=. .venv/bin/python bench/bench_timed_call_overhead.py [--trials 200] [--device cpu]

Record the numbers in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answers  # noqa: E402
from workflow_scripts.generation.replay import rename_reference_model  # noqa: E402

PROBLEM = ROOT / "tests" / "cheats" / "problems" / "1_ElementwiseAdd.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        answer = Path(tmp) / "answer.py"
        answer.write_text(rename_reference_model(PROBLEM.read_text()))
        cfg = EvalConfig(device=args.device, require_triton=False, run_static=False, timing_trials=args.trials)
        result = evaluate_answers(PROBLEM, [answer], cfg)[0]
    phases = result.phases_s
    if "timing_s" not in phases:
        raise SystemExit(f"not timed: {result.status}: {result.error}")
    checks = (result.timing_raw or {}).get("timed_checks") or {}
    observed = checks.get("observed_ms") or []
    answer_blocks = phases["timing_s"] - phases.get("timing_reference_s", 0.0) - phases.get("timing_checks_s", 0.0)
    print(json.dumps({
        "status": result.status, "device": args.device, "trials": args.trials,
        "call_ms_median": statistics.median((result.runtime_stats or {}).get("trials") or [float("nan")]),
        "observed_interval_ms_median": statistics.median(observed) if observed else None,
        "timing_s": round(phases["timing_s"], 4), "answer_blocks_s": round(answer_blocks, 4),
        "reference_blocks_s": round(phases.get("timing_reference_s", 0.0), 4),
        "checks_s": round(phases.get("timing_checks_s", 0.0), 4), "checked_calls": checks.get("checked"),
    }))


if __name__ == "__main__":
    main()
