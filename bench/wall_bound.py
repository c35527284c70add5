"""How close to KernelBench's wall any schedule of one pipeline run could come (issue 34, done-when 1 and 2).

    python3 bench/wall_bound.py --pipeline P.json [P2.json ...] --kernelbench K.json --timeline T.jsonl [--out F.json]

``--pipeline`` and ``--kernelbench``: the ``dag_vs_kernelbench.json`` records of the two sides (the latest entry of
each side's list is taken; the kernelbench side's says the walls of all its calls, added up when one was cut off and
resumed). A pipeline run cut off and resumed (``FRESH=0``) gives one record per call, in order: every call but the
last must have been cut off and the last must reach summary.json; their walls add up (work in flight at a cut is
lost and done again, so the sum is an upper bound on one uncut run). ``--timeline``: the pipeline run's
``timeline_<host>.jsonl`` (``bench/dag_bench_run.sh`` copies it out); a resumed run appends to its timeline, so the
last call's holds them all, and the time between calls counts in ``idle_s.nobody_waiting``.

The protocol's timed work (``core.records.TIMED_KINDS``: the answers' and the paired reference's timed blocks, the
probes, the placement audits, the baselines' timings and Inductor's autotuning benchmarks) must not overlap another
job's timing on its GPU; on one GPU it runs one piece at a time, so its seconds (overlaps counted once) are a floor
under the pipeline's wall whatever the scheduling. Written out:
- ``timed_s`` by activity and in all, the run's wall and KernelBench's;
- ``ratio``: the pipeline's wall over KernelBench's (done-when 1 asks at most ``TARGET_RATIO``);
- ``floor_ratio``: the timed seconds over KernelBench's wall: the least ratio this run's timed work allows;
- ``wall_for_busy_share_s``: the wall at which the timed work is ``TARGET_BUSY`` of it (done-when 2, leaving out
  that done-when's first minute).
A run whose timed work differs (autotuning alone or in the job's turn, another card) has another floor: compare
floors of runs of one configuration.

``idle_s``: where the rest of the wall went (``idle_breakdown``, each GPU's seconds added): seconds with a job waiting
to time, or to enter alone, and nothing timed (a convoy: the shared holders keep the timer out), split into those with
an evaluation holding the GPU shared, those with a baseline (and no evaluation) holding it, those with a job of another
purpose only, and those with no lease held at all (the hand-over between holders), which add up; seconds with nobody
waiting to time and nothing timed (no timed work ready), and of them those with an evaluation holding it shared;
seconds held exclusively with nothing timed.

``sole_holdbacks_s``: of the seconds a job waited to time with nothing timed, those in which exactly one other job held
the GPU shared (the job that alone kept the timer out), by that job's purpose and by whether it had timed anything yet
(an evaluation before its first timing: its preparation, its answers' starts and first checks), and the seconds two or
more held it (s39's call 1: 47.9 of the 59.3 s behind evaluations were one evaluation before its first timing).

``entry_waits``: how long jobs waited to take their first lease on the GPU (``lease_acquire``, by the job's purpose:
jobs, seconds in all, the longest, and the polling rounds refused by the memory admission, by the gate a waiting timer
holds, or by the lock itself). A job waits there before any of its work, untimed work included. A round is one poll:
0.5 s apart before de8da80, 0.05 s since (``gpu_lock.ENTRY_POLL_S``), so compare refusal counts within one version.

``autotune_windows``: the baselines' autotuning windows, their benchmarks, and how many a shorter linger would split.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

sys.path.insert(0, str(ROOT / "bench"))

from project_study import emit, timeline_lines  # noqa: E402

from workflow_scripts.core.intervals import covered_seconds  # noqa: E402
from workflow_scripts.core.records import TIMED_KINDS  # noqa: E402

TARGET_RATIO = 1 / 3  # done-when 1: the pipeline's wall at most a third of KernelBench's
TARGET_BUSY = 0.70  # done-when 2: the GPU busy timing or autotuning at least 70% of the wall


def side_wall(record: dict, side: str) -> float:
    """The wall of ``side`` in a ``dag_vs_kernelbench.json``: the pipeline's latest call, or the kernelbench side's
    calls added up, as its latest call records them (a cut-off call resumes from its job records)."""
    entries = record.get(side)
    if not entries:
        raise SystemExit(f"no {side!r} entry in the record")
    if side == "pipeline":
        latest = entries[-1]
        if not latest.get("summary_json"):
            raise SystemExit("the pipeline's latest call did not reach summary.json: its wall bounds nothing")
        return float(latest["wall_s"])
    return float(entries[-1]["wall_s_all_calls"])


def pipeline_wall(records: list[dict]) -> float:
    """The pipeline's wall over its calls in order (see the module's docstring): each earlier call cut off, the last
    reaching summary.json."""
    for number, record in enumerate(records[:-1], start=1):
        if not (record.get("pipeline") or [{}])[-1].get("timed_out"):
            raise SystemExit(f"pipeline call {number} of {len(records)} was not cut off: only the last call of a "
                             "resumed run may end on its own")
    return sum(float(r["pipeline"][-1]["wall_s"]) for r in records[:-1]) + side_wall(records[-1], "pipeline")


def timed_seconds(lines: list[dict]) -> dict[str, float]:
    """Seconds of timed work per activity and ``all`` (overlaps counted once) in a timeline's lines."""
    spans = {kind: [(float(e["start"]), float(e["end"])) for e in lines if e["activity"] == kind]
             for kind in TIMED_KINDS}
    seconds = {kind: round(covered_seconds(s), 2) for kind, s in spans.items() if s}
    seconds["all"] = round(covered_seconds([s for kind in spans.values() for s in kind]), 2)
    return seconds


# What a timer's wait and the GPU's idle seconds are split into (``idle_breakdown``): the waiting_* parts after the
# first add up to waiting_none_timed, each stretch counted once (an evaluation holding the GPU first, then a baseline,
# then a job of another purpose, then nobody: the hand-over).
IDLE_FIELDS = ("waiting_none_timed", "waiting_evaluation_shared", "waiting_baseline_shared", "waiting_other_shared",
               "waiting_none_held", "nobody_waiting", "nobody_waiting_evaluation_shared", "exclusive_none_timed")
SHARED_HOLDERS = {"evaluate": "evaluation_shared", "baseline": "baseline_shared"}  # by the lease's purpose


def idle_breakdown(lines: list[dict]) -> dict[str, float]:
    """The run's wall split by what the GPU's leases were doing while nothing was timed (exact, by a sweep over the
    intervals' ends, each GPU on its own and the GPUs' seconds added): see the module's docstring."""
    found = dict.fromkeys(IDLE_FIELDS, 0.0)
    for gpu_lines in _by_gpu(lines):
        for field, seconds in _idle_on_one_gpu(gpu_lines).items():
            found[field] += seconds
    return {k: round(v, 1) for k, v in found.items()}


def _by_gpu(lines: list[dict]) -> list[list[dict]]:
    """A timeline's lines, GPU by GPU (each GPU's idle seconds are its own; the readings add them up)."""
    return [[e for e in lines if str(e.get("gpu")) == gpu] for gpu in sorted({str(e.get("gpu")) for e in lines})]


def _waits_to_time(e: dict) -> bool:
    """A line of a job waiting to hold the GPU alone: a timer's wait, or a job entering exclusively (the device
    rates, a vLLM job), which waits as a timer does."""
    return e["activity"] == "lease_wait" or (e["activity"] == "lease_acquire" and e.get("mode") == "exclusive")


def _idle_on_one_gpu(lines: list[dict]) -> dict[str, float]:
    def kind(e: dict) -> str | None:
        if e["activity"] in TIMED_KINDS:
            return "timed"
        if _waits_to_time(e):
            return "lease_wait"
        if e["activity"] == "lease_exclusive":
            return "lease_exclusive"
        if e["activity"] == "lease_shared":
            return SHARED_HOLDERS.get(e.get("purpose"), "other_shared")
        return None

    edges = sorted((float(e[end]), +1 if end == "start" else -1, k) for e in lines if (k := kind(e))
                   for end in ("start", "end"))
    live = dict.fromkeys(("timed", "lease_wait", "lease_exclusive", "evaluation_shared", "baseline_shared",
                          "other_shared"), 0)
    out = dict.fromkeys(IDLE_FIELDS, 0.0)
    previous = edges[0][0] if edges else 0.0
    for at, step, k in edges:
        span = at - previous
        if span > 0 and not live["timed"]:
            if live["lease_exclusive"]:
                out["exclusive_none_timed"] += span
            elif live["lease_wait"]:
                out["waiting_none_timed"] += span
                holder = next((h for h in ("evaluation_shared", "baseline_shared", "other_shared") if live[h]), None)
                out[f"waiting_{holder or 'none_held'}"] += span
            else:
                out["nobody_waiting"] += span
                out["nobody_waiting_evaluation_shared"] += span if live["evaluation_shared"] else 0.0
        live[k] += step
        previous = at
    return out


def sole_holdbacks(lines: list[dict]) -> dict[str, float]:
    """The seconds a job waited to time (or to enter alone) with nothing timed and exactly one other job holding the
    GPU shared: the job that alone kept it out, by its purpose and by whether it had timed anything yet
    (``before_first_timing``: an evaluation's preparation, its answers' starts and first checks; a baseline's
    compile) or not; ``several_holders``: the seconds two or more held it. Each GPU on its own, seconds added."""
    found: dict[str, float] = defaultdict(float)
    for gpu_lines in _by_gpu(lines):
        _sole_holdbacks_on_one_gpu(gpu_lines, found)
    return {k: round(v, 1) for k, v in sorted(found.items())}


def _sole_holdbacks_on_one_gpu(lines: list[dict], found: dict[str, float]) -> None:
    first_timing: dict[object, float] = {}
    for e in lines:
        if e["activity"] in TIMED_KINDS:
            first_timing[e.get("pid")] = min(first_timing.get(e.get("pid"), float("inf")), float(e["start"]))
    edges = []
    for e in lines:
        key = ("timed" if e["activity"] in TIMED_KINDS or e["activity"] == "lease_exclusive" else
               "waiting" if _waits_to_time(e) else ("shared", e.get("pid"), e.get("purpose")) if e["activity"] == "lease_shared"
               else None)
        if key is not None:
            edges += [(float(e["start"]), +1, key), (float(e["end"]), -1, key)]
    live: dict[object, int] = defaultdict(int)
    previous = None
    for at, step, key in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        holders = [k for k, n in live.items() if n > 0 and isinstance(k, tuple)]
        if previous is not None and at > previous and live["waiting"] > 0 and live["timed"] <= 0 and holders:
            if len(holders) > 1:
                found["several_holders"] += at - previous
            else:
                _, pid, purpose = holders[0]
                state = "after_first_timing" if first_timing.get(pid, float("inf")) <= previous else "before_first_timing"
                found[f"{SHARED_HOLDERS.get(purpose, 'other_shared')}_{state}"] += at - previous
        live[key] += step
        previous = at


def entry_waits(lines: list[dict]) -> dict[str, dict[str, float]]:
    """The jobs' waits for their first lease (``lease_acquire``) by purpose: see the module's docstring."""
    found: dict[str, dict[str, float]] = {}
    for e in lines:
        if e["activity"] != "lease_acquire":
            continue
        waited = float(e["end"]) - float(e["start"])
        entry = found.setdefault(e.get("purpose", "unknown"), {"jobs": 0, "seconds": 0.0, "longest_s": 0.0,
                                                               "refused_memory": 0, "refused_gate": 0,
                                                               "refused_lock": 0})
        entry["jobs"] += 1
        entry["seconds"] += waited
        entry["longest_s"] = max(entry["longest_s"], waited)
        for reason, rounds in (e.get("refused") or {}).items():
            entry[f"refused_{reason}"] = entry.get(f"refused_{reason}", 0) + rounds
    return {purpose: {k: round(v, 1) for k, v in entry.items()} for purpose, entry in sorted(found.items())}


def autotune_windows(lines: list[dict], lingers: tuple[float, ...] = (0.02, 0.05)) -> dict[str, object]:
    """The baselines' autotuning windows (``baseline_autotune``): how many, their benchmarks, and how many a shorter
    linger than ``baseline_windows.LINGER_S`` would split (their longest gap between benchmarks above it: each split a
    hand-over more). Timelines before the windows recorded their benchmarks say so."""
    windows = [e for e in lines if e["activity"] == "baseline_autotune"]
    if not windows or any("longest_gap_s" not in e for e in windows):
        return {"windows": len(windows), "benchmarks": "not recorded (before the windows' lines counted them)"}
    return {"windows": len(windows), "benchmarks": sum(int(e["benchmarks"]) for e in windows),
            "split_at_linger_s": {str(linger): sum(float(e["longest_gap_s"]) > linger for e in windows)
                                  for linger in lingers}}


def bound(pipeline_wall_s: float, kernelbench_wall_s: float, timed: dict[str, float]) -> dict[str, float | bool]:
    return {"pipeline_wall_s": pipeline_wall_s, "kernelbench_wall_s": kernelbench_wall_s,
            "ratio": round(pipeline_wall_s / kernelbench_wall_s, 3),
            "target_wall_s": round(TARGET_RATIO * kernelbench_wall_s, 1),
            "floor_ratio": round(timed["all"] / kernelbench_wall_s, 3),
            "target_reachable": timed["all"] <= TARGET_RATIO * kernelbench_wall_s,
            "wall_for_busy_share_s": round(timed["all"] / TARGET_BUSY, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", type=Path, nargs="+", required=True, help="one record per call, in order")
    parser.add_argument("--kernelbench", type=Path, required=True)
    parser.add_argument("--timeline", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = timeline_lines(args.timeline)
    timed = timed_seconds(lines)
    record = {"inputs": {"pipeline": [str(p) for p in args.pipeline], "kernelbench": str(args.kernelbench),
                         "timeline": str(args.timeline)},
              "timed_s": timed, "idle_s": idle_breakdown(lines), "sole_holdbacks_s": sole_holdbacks(lines),
              "entry_waits": entry_waits(lines),
              "autotune_windows": autotune_windows(lines),
              "bound": bound(pipeline_wall([json.loads(p.read_text()) for p in args.pipeline]),
                             side_wall(json.loads(args.kernelbench.read_text()), "kernelbench"), timed)}
    emit(record, ("timed_s", "idle_s", "sole_holdbacks_s", "entry_waits", "autotune_windows", "bound"), args.out)


if __name__ == "__main__":
    main()
