"""The run's GPU timeline and how busy each GPU was (issue 34), from the lines every job appended to its host's
``timeline.jsonl`` (``evaluation/timeline.py``): ``spans`` is one row per interval, ``usage`` one row per host and
GPU. Busy means timed work (``core.records.TIMED_KINDS``: an answer's, the paired reference's and the probe's timed
blocks, and the baselines' timings and autotuning windows; a baseline's compilation runs under its shared lease and
is not busy time: ``compile_time_s`` says how long it took); the share is taken after the first minute, which holds
the run's start (environment, prompts, the first processes) rather than the steady state the study runs in. Each
lease's whole hold (``lease_held``) says what memory admission counted it for: on an 80 GB H100 the whole-DAG bench's
jobs declared most of the card through most of the run while the GPU timed a third of it (bench/README.md, s38)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.core.columns import column_names
from workflow_scripts.core.intervals import covered_seconds, overlap_seconds
from workflow_scripts.core.records import GENERATION_PURPOSE, RUN_START_FILE, TIMED_KINDS, TIMELINE_FILE

STEADY_AFTER_S = 60.0  # the busy share leaves out the run's first minute


def run_start(locks: Path | str) -> float | None:
    """When the latest run of the results folder started (``timeline.mark_run_start``); None before any."""
    path = Path(locks) / RUN_START_FILE
    if not path.is_file():
        return None
    try:
        return float(json.loads(path.read_text())["start"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a run start ({e})") from None


def load_spans(locks: Path | str) -> pd.DataFrame:
    """The latest run's lines (from its ``run_start`` on; every line without one) of every host's timeline under
    the run's lock folder (``<results>/.locks/<host>/``), ordered by start; ``start`` in seconds since the run's first
    interval. A line that is not an interval is refused with its file and line number."""
    since = run_start(locks)
    records: list[dict[str, Any]] = []
    for path in sorted(Path(locks).glob(f"*/{TIMELINE_FILE}")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                item = json.loads(line)
                start, end = float(item["start"]), float(item["end"])
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{number}: not a timeline interval ({e})") from None
            if since is not None and start < since:
                continue  # an earlier run's
            records.append({"host": path.parent.name, "gpu": str(item.get("gpu")), "activity": str(item["activity"]),
                            "purpose": item.get("purpose"), "problem": item.get("problem"),
                            "answer": item.get("answer"), "start": start, "seconds": max(0.0, end - start),
                            "compile_time_s": item.get("compile_time_s"), "pid": item.get("pid"),
                            "declared_gib": item.get("declared_gib"), "admits_gib": item.get("admits_gib")})
    frame = pd.DataFrame.from_records(records, columns=column_names("gpu_timeline"))
    if not frame.empty:
        frame["start"] = frame["start"] - frame["start"].min()
        frame = frame.sort_values(["start", "activity"], kind="stable").reset_index(drop=True)
    return frame.astype({"host": "string", "gpu": "string", "activity": "string", "purpose": "string",
                         "problem": "string", "answer": "string", "start": "float64", "seconds": "float64",
                         "compile_time_s": "Float64", "pid": "Int64", "declared_gib": "Float64",
                         "admits_gib": "Float64"})


def usage(spans: pd.DataFrame, steady_after_s: float = STEADY_AFTER_S) -> pd.DataFrame:
    """One row per host and GPU: its wall, its busy share after ``steady_after_s``, its exclusive time without timed
    work, a generating engine's hold and any timed work beside it, the waits, and the seconds per answer and per
    baseline. The busy share counts timed work only: a GPU that generates, then times, shows generation as not busy
    (``generation_s`` says how long)."""
    rows = []
    for (host, gpu), own in spans.groupby(["host", "gpu"], sort=True):
        first, last = float(own["start"].min()), float((own["start"] + own["seconds"]).max())
        timed = own[own["activity"].isin(TIMED_KINDS)]
        exclusive = own[own["activity"] == "lease_exclusive"]
        # A vLLM engine holds its GPUs exclusively while it generates: busy, but not timing, and nothing may be timed
        # beside it (done-when 5 of issue 34): its own columns, out of the exclusive time of the timing jobs.
        generating = exclusive["purpose"].eq(GENERATION_PURPOSE).fillna(False).astype(bool)  # no purpose: not an engine
        busy, generation = _intervals(timed), _intervals(exclusive[generating])
        held = _intervals(exclusive[~generating])
        steady_from = first + steady_after_s if last - first > steady_after_s else first
        per_answer = timed[timed["activity"].str.startswith("timing_")].groupby(["problem", "answer"])["seconds"].sum()
        baselines = timed[timed["activity"].str.startswith("baseline_")]
        per_baseline = baselines.groupby("problem")["seconds"].sum()
        compile_s = baselines.groupby("problem")["compile_time_s"].sum(min_count=1).dropna()
        busy_s, held_s = covered_seconds(busy), covered_seconds(held)
        rows.append({
            "host": host, "gpu": gpu, "wall_s": last - first,
            "busy_s": busy_s, "steady_from_s": steady_from - first,
            "busy_share_steady": (covered_seconds(busy, steady_from, last) / (last - steady_from)
                                  if last > steady_from else None),
            "exclusive_s": held_s,
            "exclusive_idle_s": held_s - overlap_seconds(held, busy),  # held exclusively without timed work
            "generation_s": covered_seconds(generation),
            "timed_beside_generation_s": overlap_seconds(busy, generation),
            "lease_wait_s": float(own.loc[own["activity"] == "lease_wait", "seconds"].sum()),
            "acquire_wait_s": float(own.loc[own["activity"] == "lease_acquire", "seconds"].sum()),
            "answers_timed": int(per_answer.size),
            "seconds_per_answer": float(per_answer.median()) if per_answer.size else None,
            "baselines": int(per_baseline.size),
            "seconds_per_baseline": float(per_baseline.median()) if per_baseline.size else None,
            "compile_seconds_per_baseline": float(compile_s.median()) if compile_s.size else None,
            **_declared_memory(own, first, last),
        })
    frame = pd.DataFrame.from_records(rows, columns=column_names("gpu_usage"))
    return frame.astype({"host": "string", "gpu": "string", "answers_timed": "Int64", "baselines": "Int64",
                         "busy_share_steady": "Float64", "seconds_per_answer": "Float64",
                         "seconds_per_baseline": "Float64", "compile_seconds_per_baseline": "Float64",
                         "admits_gib": "Float64", "declared_gib_mean": "Float64", "memory_bound_s": "Float64"})


def _declared_memory(own: pd.DataFrame, first: float, last: float) -> dict[str, float | None]:
    """What memory admission counted the GPU's leases for: the ceiling, the declared memory averaged over the wall
    and the wall those declarations alone need. A lease's hold is its lease_held line; a job killed while holding (a
    call cut off) wrote none, and its hold runs from its entry (lease_acquire, which says the same) to the GPU's last
    line. None where no lease declared memory."""
    declared = own[own["declared_gib"].notna()]
    held = declared[declared["activity"] == "lease_held"]
    entered = declared[(declared["activity"] == "lease_acquire") & ~declared["pid"].isin(held["pid"])]
    if held.empty and entered.empty:
        return {"admits_gib": None, "declared_gib_mean": None, "memory_bound_s": None}
    gib_s = float((held["declared_gib"] * held["seconds"]).sum())
    gib_s += float((entered["declared_gib"] * (last - entered["start"] - entered["seconds"])).sum())
    ceilings = declared["admits_gib"].dropna()
    admits = float(ceilings.max()) if len(ceilings) else None
    return {"admits_gib": admits, "declared_gib_mean": gib_s / (last - first) if last > first else None,
            "memory_bound_s": gib_s / admits if admits else None}


def _intervals(spans: pd.DataFrame) -> list[tuple[float, float]]:
    return [(start, start + seconds) for start, seconds in zip(spans["start"], spans["seconds"])]
