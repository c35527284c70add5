"""Where one run's answers spent their wall (issue 34): each evaluation record's ``phases_s`` summed over the run and
divided by the answers judged, the answers timed or those held running, as each phase applies. Which part stood
stopped while other jobs timed (``stepped_aside_s``), which ran on held beside them (``answer_gpu_held_s``,
``evaluation.compile_beside_timing``), and what the answer's own steps took; per problem, what its job's preparation
of the trusted side took. A run is a results folder or a ``dag_results.tgz`` from bench/dag_bench_run.sh.

    python3 bench/answer_phases.py RUN [--out F.json]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from compare_baselines import required_records

# Phases per answer judged (every record has them, or they count as 0), and the per-answer phases of timed answers.
PER_ANSWER = ("answer_wall_s", "stepped_aside_s", "correctness_s", "load_s", "child_startup_s", "child_gate_wait_s",
              "gpu_turn_wait_s", "answer_gpu_held_s", "cpu_beside_timing_s", "answer_late_stops")
PER_TIMED = ("timing_s", "timing_reference_s", "gpu_lock_wait_s", "answer_stopped_s")
# The job's preparation of a problem's trusted side, which every answer of the problem's job carries alike: summed once
# per problem (the problem's file name, whichever model's record), then divided by the problems.
PER_PROBLEM = ("reference_prepare_s", "prepare_reference_init_s", "prepare_seeded_inputs_s", "prepare_seeded_forward_s",
               "prepare_tf32_audit_s", "prepare_timing_s", "prepare_turn_wait_s")


def answer_phases(evaluations: dict[str, dict]) -> dict[str, Any]:
    sums: dict[str, float] = defaultdict(float)
    timed = held = 0
    for record in evaluations.values():
        phases = record.get("phases_s") or {}
        for name, value in phases.items():
            if isinstance(value, (int, float)):
                sums[name] += float(value)
        timed += "timing_s" in phases
        held += bool(phases.get("answer_gpu_held_s"))
    answers = len(evaluations)
    return {
        "answers": answers,
        "answers_timed": timed,
        "answers_held_running": held,
        "per_answer_s": {name: round(sums[name] / answers, 3) for name in PER_ANSWER} if answers else {},
        "per_timed_answer_s": {name: round(sums[name] / timed, 3) for name in PER_TIMED} if timed else {},
        **_per_problem(evaluations),
        "beside_others_timing": dict(sorted(_count(evaluations, "beside_others_timing").items())),
    }


def _per_problem(evaluations: dict[str, dict]) -> dict[str, Any]:
    """``problems`` and ``per_problem_s``: each of ``PER_PROBLEM`` taken once per problem (records are keyed
    ``<model>/<problem file>``; the largest of the problem's records, which carry the same value)."""
    by_problem: dict[str, dict[str, float]] = defaultdict(dict)
    for key, record in evaluations.items():
        phases = record.get("phases_s") or {}
        own = by_problem[key.rsplit("/", 1)[-1]]
        for name in PER_PROBLEM:
            value = phases.get(name)
            if isinstance(value, (int, float)):
                own[name] = max(own.get(name, 0.0), float(value))
    problems = len(by_problem)
    return {"problems": problems,
            "per_problem_s": {name: round(sum(own.get(name, 0.0) for own in by_problem.values()) / problems, 3)
                              for name in PER_PROBLEM} if problems else {}}


def _count(evaluations: dict[str, dict], key: str) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for record in evaluations.values():
        counts[str((record.get("protocol") or {}).get(key))] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="a results folder or a dag_results.tgz")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found = {"run": str(args.run), **answer_phases(required_records(args.run, "evaluations", "evaluations/*.json"))}
    text = json.dumps(found, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
