"""The run's GPU timeline (issue 34): the lines jobs append (evaluation/timeline.py, gpu_lock's leases) and the
tables made from them (scoring/gpu_timeline.py). Unit checks; tests/test_pipeline_e2e.py reads the demo run's."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from workflow_scripts.evaluation import gpu_lock, timeline
from workflow_scripts.core.intervals import covered_seconds, overlap_seconds
from workflow_scripts.scoring.gpu_timeline import load_spans, usage


def lines(lock_dir: Path) -> list[dict]:
    return [json.loads(line) for line in timeline.timeline_path(lock_dir).read_text().splitlines()]


def test_a_lease_writes_each_mode_it_held_and_the_wait_of_its_upgrade(tmp_path: Path) -> None:
    with gpu_lock.acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as lease:
        time.sleep(0.05)
        lease.upgrade()
        time.sleep(0.05)
        lease.downgrade()
    kinds = [(e["activity"], e["gpu"], e["purpose"]) for e in lines(tmp_path)]
    assert kinds == [("lease_acquire", "0", "evaluate"), ("lease_shared", "0", "evaluate"),
                     ("lease_wait", "0", "evaluate"), ("lease_exclusive", "0", "evaluate"),
                     ("lease_shared", "0", "evaluate"), ("lease_held", "0", "evaluate")]
    assert lines(tmp_path)[0]["refused"] == {"memory": 0, "gate": 0, "lock": 0}  # nothing kept it waiting
    exclusive = lines(tmp_path)[3]
    assert exclusive["end"] - exclusive["start"] >= 0.04
    starts = [e["start"] for e in lines(tmp_path)[:-1]]
    assert starts == sorted(starts)
    # The whole hold, from the entry to the last mode's end; it declared no memory.
    held = lines(tmp_path)[-1]
    assert held["start"] == lines(tmp_path)[0]["end"] and held["end"] >= lines(tmp_path)[-2]["end"]
    assert held["declared_gib"] is None and held["admits_gib"] is None


def test_a_lease_says_what_memory_admission_counted_it_for(tmp_path: Path) -> None:
    queried = []
    with pytest.raises(RuntimeError, match="the job failed"):
        with gpu_lock.acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="baseline",
                                  expected_mem_gib=7.0, capacity_gib=lambda gpu: queried.append(gpu) or 80.0):
            raise RuntimeError("the job failed")
    entry, held = lines(tmp_path)[0], lines(tmp_path)[-1]
    assert held["activity"] == "lease_held" and held["declared_gib"] == entry["declared_gib"] == 7.0  # also raising
    assert held["admits_gib"] == entry["admits_gib"] == pytest.approx(gpu_lock.DEVICE_SHARE * 80.0)
    assert queried == ["0"]  # the card's memory read once, by the admission


def test_a_lease_killed_while_holding_counts_to_the_gpu_s_last_line(tmp_path: Path) -> None:
    """A job killed as a call is cut off writes its entry but no lease_held: its declared memory counts from its
    entry to the GPU's last line."""
    host = tmp_path / "node1"
    for activity, pid, start, end, extra in [
            ("lease_acquire", 1, 0, 2, {"purpose": "evaluate", "declared_gib": 10.0, "admits_gib": 76.0}),
            ("lease_held", 1, 2, 30, {"purpose": "evaluate", "declared_gib": 10.0, "admits_gib": 76.0}),
            ("lease_acquire", 2, 0, 10, {"purpose": "baseline", "declared_gib": 20.0, "admits_gib": 76.0}),
            ("timing_answer", 3, 90, 100, {"problem": "p", "answer": "a.py"})]:
        line = {"activity": activity, "gpu": "0", "start": 1000.0 + start, "end": 1000.0 + end, "pid": pid, **extra}
        host.mkdir(exist_ok=True)
        with timeline.timeline_path(host).open("a") as out:
            out.write(json.dumps(line) + "\n")
    row = usage(load_spans(tmp_path)).iloc[0]
    assert row["memory_bound_s"] == pytest.approx((10 * 28 + 20 * 90) / 76.0)


def test_declared_memory_over_the_wall_and_the_wall_it_needs(tmp_path: Path) -> None:
    """Two jobs declared 40 GiB for 50 s and 30 GiB for 100 s of a GPU that admits 76: the declarations alone need
    (2,000 + 3,000) GiB-s / 76 GiB of wall, whatever the packing; over the 100-s wall, 50 GiB on average. A lease that
    declared nothing (an engine's) counts for nothing."""
    host = tmp_path / "node1"
    for activity, start, end, extra in [
            ("lease_held", 0, 50, {"purpose": "evaluate", "declared_gib": 40.0, "admits_gib": 76.0}),
            ("lease_held", 0, 100, {"purpose": "baseline", "declared_gib": 30.0, "admits_gib": 76.0}),
            ("lease_held", 50, 100, {"purpose": "vllm", "declared_gib": None, "admits_gib": None}),
            ("timing_answer", 10, 20, {"problem": "p", "answer": "a.py"})]:
        timeline.append(host, activity, "0", 1000.0 + start, 1000.0 + end, **extra)
    row = usage(load_spans(tmp_path)).iloc[0]
    assert row["admits_gib"] == 76.0 and row["declared_gib_mean"] == pytest.approx((40 * 50 + 30 * 100) / 100)
    assert row["memory_bound_s"] == pytest.approx((40 * 50 + 30 * 100) / 76.0)
    assert row["busy_s"] == 10  # a lease's hold is not timed work


def test_a_timeline_without_declared_memory_says_none(tmp_path: Path) -> None:
    timeline.append(tmp_path / "node1", "timing_answer", "0", 1000.0, 1001.0, problem="p", answer="a.py")
    row = usage(load_spans(tmp_path)).iloc[0]
    assert row[["admits_gib", "declared_gib_mean", "memory_bound_s"]].isna().all()


def test_concurrent_writers_never_interleave_their_lines(tmp_path: Path) -> None:
    def write(k: int) -> None:
        for i in range(200):
            timeline.append(tmp_path, "timing_answer", "0", 1.0, 2.0, answer=f"a{k}-{i}" + "x" * 300)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lines(tmp_path)) == 800  # every line parses: none was cut into another


def test_covered_seconds_counts_overlaps_once_and_clips() -> None:
    assert covered_seconds([(0, 2), (1, 3), (5, 6)]) == 4
    assert covered_seconds([(0, 2), (1, 3), (5, 6)], 1.5, 5.5) == 2.0
    assert covered_seconds([]) == 0
    assert overlap_seconds([(0, 2), (1, 3)], [(2.5, 6), (5, 7)]) == 0.5 and overlap_seconds([(0, 1)], []) == 0


def test_usage_from_a_hand_written_timeline(tmp_path: Path) -> None:
    host = tmp_path / socket.gethostname()
    t = 1000.0
    # An evaluation: shared 0-70, waits 70-72, exclusive 72-82 with 8 s of timed blocks, shared again to 90;
    # a baseline from 100 to 130 (compile run 110-130, 15 s of it compiling); another GPU idle but for a lease.
    for activity, gpu, start, end, extra in [
            ("lease_acquire", "0", 0, 3, {"purpose": "evaluate"}),
            ("lease_shared", "0", 0, 70, {"purpose": "evaluate"}), ("lease_wait", "0", 70, 72, {"purpose": "evaluate"}),
            ("timing_probe", "0", 72, 73, {"problem": "p1", "answer": "a.py"}),
            ("timing_answer", "0", 73, 77, {"problem": "p1", "answer": "a.py"}),
            ("timing_reference", "0", 77, 80, {"problem": "p1", "answer": "a.py"}),
            ("lease_exclusive", "0", 72, 82, {"purpose": "evaluate"}), ("lease_shared", "0", 82, 90, {}),
            ("baseline_eager", "0", 100, 110, {"problem": "p1"}),
            ("baseline_compile", "0", 110, 130, {"problem": "p1", "compile_time_s": 15.0}),
            ("lease_exclusive", "1", 0, 5, {"purpose": "vllm"})]:
        timeline.append(host, activity, gpu, t + start, t + end, **extra)
    spans = load_spans(tmp_path)
    assert len(spans) == 11 and spans["start"].min() == 0 and set(spans["host"]) == {socket.gethostname()}
    table = usage(spans).set_index("gpu")
    gpu0 = table.loc["0"]
    assert gpu0["wall_s"] == 130 and gpu0["busy_s"] == 8 + 30 and gpu0["exclusive_idle_s"] == 2
    assert gpu0["busy_share_steady"] == pytest.approx((8 + 30) / 70)  # from second 60 on
    assert gpu0["seconds_per_answer"] == 8 and gpu0["answers_timed"] == 1 and gpu0["lease_wait_s"] == 2
    assert gpu0["acquire_wait_s"] == 3
    assert gpu0["seconds_per_baseline"] == 30 and gpu0["compile_seconds_per_baseline"] == 15
    assert table.loc["1", "busy_s"] == 0 and table.loc["1", "busy_share_steady"] == 0
    # GPU 1's exclusive lease was a generating engine's: its own column, not a timing job's exclusive time.
    assert table.loc["1", "generation_s"] == 5 and table.loc["1", "exclusive_s"] == 0
    assert gpu0["generation_s"] == 0 and (table["timed_beside_generation_s"] == 0).all()


def test_timed_work_beside_a_generating_engine_is_counted(tmp_path: Path) -> None:
    """What the lock rules out, seen if it ever happens: seconds of timing while an engine held the GPU."""
    host = tmp_path / "node1"
    for activity, start, end, extra in [("lease_exclusive", 0, 10, {"purpose": "vllm"}),
                                        ("timing_answer", 8, 12, {"problem": "p", "answer": "a.py"}),
                                        ("timing_reference", 9, 11, {"problem": "p", "answer": "a.py"}),
                                        ("baseline_eager", 20, 21, {"problem": "p"}),
                                        ("lease_exclusive", 20, 22, {})]:  # a lease line without a purpose
        timeline.append(host, activity, "0", 1000.0 + start, 1000.0 + end, **extra)
    row = usage(load_spans(tmp_path)).iloc[0]
    assert row["generation_s"] == 10 and row["timed_beside_generation_s"] == 2 and row["busy_s"] == 5
    assert row["exclusive_s"] == 2


def test_the_tables_are_the_latest_run_s(tmp_path: Path) -> None:
    host = tmp_path / "node1"
    timeline.append(host, "timing_answer", "0", 100.0, 101.0, problem="p", answer="earlier")
    assert len(load_spans(tmp_path)) == 1  # no run marked: every line
    timeline.mark_run_start(tmp_path)
    timeline.append(host, "timing_answer", "0", time.time(), time.time() + 1.0, problem="p", answer="latest")
    assert list(load_spans(tmp_path)["answer"]) == ["latest"]
    (tmp_path / "run_start.json").write_text("{}")
    with pytest.raises(ValueError, match="run_start.json: not a run start"):
        load_spans(tmp_path)


def test_a_line_that_is_not_an_interval_is_refused_with_its_place(tmp_path: Path) -> None:
    host = tmp_path / "node1"
    host.mkdir()
    (host / timeline.TIMELINE_FILE).write_text('{"activity": "timing_answer", "start": 1, "end": 2}\n{"activity": "x"}\n')
    with pytest.raises(ValueError, match=r"node1/timeline.jsonl:2: not a timeline interval"):
        load_spans(tmp_path)
    assert load_spans(tmp_path / "nothing").empty
