"""Where an answer's exclusive GPU window goes, and what that projects for a study (issue 34's 90-minute line).

Reads the evaluator bench's records (bench/gpu_problem_worker.py: ``phases_s`` of each correct answer) and prints the
mean seconds per answer of the exclusive window (``timing_s``) and its parts: the answer's own timed calls (its
runtime x the 101 calls the trusted side counts), the paired reference's blocks, the timed-call checks, the overhead
probe, and the rest (warm-up calls, per-call draws, flushes and messages), the placement audit (inside each problem's
first window) apart; then the exclusive seconds a study of
``--answers`` answers on ``--problems`` problems would hold the GPU for its answers alone (baselines not included:
no baseline of the current code has been timed on a GPU).

    python bench/exclusive_time.py bench/archive/h200/2026-12-06-session23/3c90b1d_call2_gpu_problem_worker.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

CALLS = 101  # the answer's timed calls per evaluation on CUDA, as the records' timed_checks.calls count them


def breakdown(records: list[dict]) -> dict[str, float]:
    """Mean seconds per correct answer of each part of its exclusive window, and the audit's per problem."""
    correct = [r for r in records if r.get("bench") == "calibration" and r.get("status") == "correct"]
    if not correct:
        raise SystemExit("no correct calibration answers in the records")

    def mean(key: str) -> float:
        return statistics.mean(r["phases_s"].get(key, 0.0) for r in correct)

    calls = statistics.mean((r.get("runtime_ms") or 0.0) * CALLS / 1e3 for r in correct)
    parts = {"answers": len(correct), "window_s": mean("timing_s"), "answer_calls_s": calls,
             "reference_blocks_s": mean("timing_reference_s"), "checks_s": mean("timing_checks_s"),
             "probe_s": mean("timing_probe_s"), "placement_audit_per_problem_s": mean("placement_audit_s")}
    # The audit runs inside its problem's first timed answer's window (each calibration answer is one): a study's
    # other answers hold the window without it.
    parts["window_without_audit_s"] = parts["window_s"] - parts["placement_audit_per_problem_s"]
    parts["rest_s"] = (parts["window_without_audit_s"] - calls - parts["reference_blocks_s"] - parts["checks_s"]
                       - parts["probe_s"])
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path)
    parser.add_argument("--answers", type=int, default=3000)
    parser.add_argument("--problems", type=int, default=200)
    args = parser.parse_args()
    parts = breakdown([json.loads(line) for line in args.records.read_text().splitlines() if line.strip()])
    exclusive_min = (args.answers * parts["window_without_audit_s"]
                     + args.problems * parts["placement_audit_per_problem_s"]) / 60
    print(json.dumps({k: round(v, 3) for k, v in parts.items()} | {
        "projection": {"answers": args.answers, "problems": args.problems,
                       "exclusive_minutes_for_answers": round(exclusive_min, 1)}}, indent=1))


if __name__ == "__main__":
    main()
