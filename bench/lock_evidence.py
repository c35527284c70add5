"""Two runs of the same answers side by side (issue 34, done-when 6): each answer's status in both, and what the second
run's records say of the CUDA driver's lock (evaluation/cuda_lock.py) and of the baselines stepping aside. Each run is
a results folder or a `dag_results.tgz` from bench/dag_bench_run.sh.

    python3 bench/lock_evidence.py RUN_BEFORE RUN_AFTER [--out F.json]

Per answer of the second run: `phases_s.answer_gpu_locks` (locks taken while its tree was stopped),
`answer_stop_incomplete`, `lease_incomplete_stops`, `lease_pinned`, the `gpu_work_*` flags; per baseline:
`phases_s.stopped_s`, `gpu_held_s` and `protocol.beside_others_timing`; the evaluations' `protocol.gpu_work_held` and `yield_gpu`.
Where answers were held running beside other jobs' timing (`evaluation.compile_beside_timing`): their
`protocol.beside_others_timing`, the seconds so held and the CPU seconds meanwhile (`phases_s.answer_gpu_held_s`,
`cpu_beside_timing_s`), the processes stopped as they appeared (`answer_late_stops`), holds this side could not
confirm (`answer_holds_unconfirmed`), the answers flagged
`hold_broken` or `cpu_beside_timing` (where not empty, honest answers met the checks).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from compare_baselines import records, required_records, two_runs


def statuses(evaluations: dict[str, dict]) -> dict[str, str]:
    return {name: record.get("status", "?") for name, record in evaluations.items()}


def lock_evidence(evaluations: dict[str, dict], baselines: dict[str, dict]) -> dict[str, Any]:
    phases = {name: record.get("phases_s") or {} for name, record in evaluations.items()}
    flags = Counter(flag for record in evaluations.values() for flag in record.get("flags") or []
                    if flag.startswith("gpu_work_"))
    held_running = {name: phase for name, phase in phases.items() if phase.get("answer_gpu_held_s")}
    locks = [phase.get("answer_gpu_locks", 0.0) for phase in phases.values()]
    held = {name: (record.get("phases_s") or {}) for name, record in baselines.items()}
    return {
        "answers": len(evaluations),
        "answers_with_locks": sum(1 for count in locks if count > 0),
        "locks_taken": sum(locks),
        "answer_stop_incomplete": sorted(name for name, phase in phases.items() if phase.get("answer_stop_incomplete")),
        # The answers whose lease met a stop that did not hold their tree (the upgrade's or the yielding watcher's),
        # and those whose job's lease had given up yielding: where not empty, honest answers met the checks (15eb98d).
        "lease_incomplete_stops": sorted(name for name, phase in phases.items() if phase.get("lease_incomplete_stops")),
        "lease_pinned": sorted(name for name, phase in phases.items() if phase.get("lease_pinned")),
        "gpu_work_flags": dict(flags),
        "gpu_work_held": dict(Counter(str((record.get("protocol") or {}).get("gpu_work_held"))
                                      for record in evaluations.values())),
        "yield_gpu": dict(Counter(str((record.get("protocol") or {}).get("yield_gpu")) for record in evaluations.values())),
        "beside_others_timing": dict(Counter(str((record.get("protocol") or {}).get("beside_others_timing"))
                                             for record in evaluations.values())),
        "answers_held_running": len(held_running),
        "answer_gpu_held_s": round(sum(phase["answer_gpu_held_s"] for phase in held_running.values()), 2),
        "cpu_beside_timing_s": round(sum(phase.get("cpu_beside_timing_s", 0.0) for phase in held_running.values()), 2),
        "answer_late_stops": sum(phase.get("answer_late_stops", 0.0) for phase in held_running.values()),
        "answer_holds_unconfirmed": sum(phase.get("answer_holds_unconfirmed", 0.0) for phase in held_running.values()),
        "hold_flags": {flag: sorted(name for name, record in evaluations.items() if flag in (record.get("flags") or []))
                       for flag in ("hold_broken", "cpu_beside_timing")},
        "baselines": len(baselines),
        "baseline_beside_others_timing": dict(Counter(str((record.get("protocol") or {}).get("beside_others_timing"))
                                                      for record in baselines.values())),
        "baseline_stopped_s": round(sum(phase.get("stopped_s", 0.0) for phase in held.values()), 2),
        "baseline_gpu_held_s": round(sum(phase.get("gpu_held_s", 0.0) for phase in held.values()), 2),
    }


def main() -> None:
    args = two_runs(__doc__.splitlines()[0], "before", "after")
    before_records, after_records = (required_records(run, "evaluations", "evaluations/<model>/*.json")
                                      for run in (args.before, args.after))
    before, after = statuses(before_records), statuses(after_records)
    # A smaller run (a few problems of the same answers) is compared where both judged the answer.
    changed = {name: [before[name], after[name]] for name in sorted(before.keys() & after.keys())
               if before[name] != after[name]}
    report = {"before": str(args.before), "after": str(args.after),
              "statuses_before": dict(Counter(before.values())), "statuses_after": dict(Counter(after.values())),
              "judged_in_both": len(before.keys() & after.keys()), "changed": changed,
              "only_before": len(before.keys() - after.keys()), "only_after": len(after.keys() - before.keys()),
              "after_lock": lock_evidence(after_records, records(args.after, "baselines"))}
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
