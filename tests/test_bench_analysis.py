"""The readings of a whole-DAG run (issue 34): bench/wall_bound.py's, where the wall went while nothing was timed and
how long jobs waited to get onto the GPU (done-when 2), bench/declared_resources.py's reading of what Snakemake's
bounds let run at once, bench/project_study.py's projection to the study (done-when 4), and bench/answer_phases.py's
reading of where the answers' wall went."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from answer_phases import answer_phases  # noqa: E402
from declared_resources import parse_log, usage  # noqa: E402
from project_study import BUDGET_S, admitted_concurrency, project, study_admission  # noqa: E402

from workflow_scripts.evaluation.resources import Memory  # noqa: E402
from wall_bound import autotune_windows, entry_waits, idle_breakdown, pipeline_wall, sole_holdbacks  # noqa: E402


def span(activity: str, start: float, end: float, **fields: object) -> dict:
    return {"activity": activity, "gpu": "0", "start": start, "end": end, "pid": 1, **fields}


def test_idle_seconds_are_split_by_who_held_the_gpu_while_a_timer_waited() -> None:
    lines = [
        span("timing_answer", 0.0, 1.0),
        # 1-3: a timer waits while an evaluation holds the GPU shared (a baseline too from 2.5); 3-4 a baseline alone;
        # 4-4.5 nobody holds it (the hand-over)
        span("lease_wait", 1.0, 4.5, purpose="evaluate"),
        span("lease_shared", 0.5, 3.0, purpose="evaluate"),
        span("lease_shared", 2.5, 4.0, purpose="baseline"),
        span("lease_exclusive", 4.5, 6.0, purpose="evaluate"),
        span("timing_answer", 5.0, 6.0),  # 4.5-5: held exclusively, nothing timed
        span("lease_shared", 6.0, 8.0, purpose="evaluate"),  # 6-8: nobody waits, an evaluation holds it
        span("lease_shared", 8.0, 9.0, purpose="baseline"),  # 8-9: nobody waits, a baseline holds it
        span("timing_answer", 9.0, 10.0),
        # 10-11: a job entering alone (the device rates) waits while a job started by hand ("job") holds it shared
        span("lease_acquire", 10.0, 11.0, purpose="device_rates", mode="exclusive"),
        span("lease_shared", 9.5, 11.0, purpose="job"),
        span("timing_answer", 11.0, 12.0),
    ]
    idle = idle_breakdown(lines)
    assert idle == {
        "waiting_none_timed": 4.5, "waiting_evaluation_shared": 2.0, "waiting_baseline_shared": 1.0,
        "waiting_other_shared": 1.0, "waiting_none_held": 0.5, "nobody_waiting": 3.0,
        "nobody_waiting_evaluation_shared": 2.0, "exclusive_none_timed": 0.5}
    parts = ("waiting_evaluation_shared", "waiting_baseline_shared", "waiting_other_shared", "waiting_none_held")
    assert sum(idle[k] for k in parts) == idle["waiting_none_timed"]  # each stretch counted once


def test_a_timer_s_wait_is_laid_to_the_one_job_that_alone_held_the_gpu_and_to_its_state() -> None:
    lines = [
        span("timing_answer", 0.0, 1.0, pid=7),  # job 7 timed from 0: after its first timing from then on
        span("lease_wait", 1.0, 6.0, purpose="evaluate", pid=9),
        span("lease_shared", 0.5, 3.0, purpose="evaluate", pid=8),  # 1-2: job 8 alone, before its first timing
        span("lease_shared", 2.0, 4.0, purpose="evaluate", pid=7),  # 2-3: both; 3-4: job 7 alone, after its first
        span("lease_shared", 4.5, 5.5, purpose="baseline", pid=6),  # 4-4.5: nobody; 4.5-5: a baseline alone
        span("baseline_eager", 5.0, 5.5, pid=6),  # 5-5.5: timed: no holdback
        span("timing_answer", 6.0, 7.0, pid=9),
        {**span("lease_shared", 1.0, 6.0, purpose="evaluate", pid=5), "gpu": "1"},  # another GPU's: not this wait's
        span("timing_answer", 7.0, 8.0, pid=8),
    ]
    assert sole_holdbacks(lines) == {"baseline_shared_before_first_timing": 0.5,
                                     "evaluation_shared_after_first_timing": 1.0,
                                     "evaluation_shared_before_first_timing": 1.0, "several_holders": 1.0}


def test_each_gpu_is_swept_on_its_own() -> None:
    # GPU 1's evaluation holds nothing of GPU 0, whose timer waits for nobody: a hand-over there.
    lines = [span("lease_wait", 0.0, 2.0, purpose="evaluate"), span("timing_answer", 2.0, 3.0),
             {**span("lease_shared", 0.0, 3.0, purpose="evaluate"), "gpu": "1"}]
    idle = idle_breakdown(lines)
    assert idle["waiting_none_held"] == 2.0 and idle["waiting_evaluation_shared"] == 0.0
    assert idle["nobody_waiting_evaluation_shared"] == 3.0  # GPU 1: nothing timed, nobody waiting, 3 s held


def test_entry_waits_add_up_each_purpose_and_its_refusals() -> None:
    lines = [
        span("lease_acquire", 0.0, 2.5, purpose="evaluate", refused={"memory": 1, "gate": 4, "lock": 0}),
        span("lease_acquire", 1.0, 1.5, purpose="evaluate", refused={"memory": 0, "gate": 0, "lock": 2}),
        span("lease_acquire", 3.0, 3.0, purpose="baseline", refused={"memory": 0, "gate": 0, "lock": 0}),
        span("lease_shared", 2.5, 9.0, purpose="evaluate"),  # not an entry
    ]
    waits = entry_waits(lines)
    assert waits["evaluate"] == {"jobs": 2, "seconds": 3.0, "longest_s": 2.5, "refused_memory": 1,
                                 "refused_gate": 4, "refused_lock": 2}
    assert waits["baseline"]["jobs"] == 1 and waits["baseline"]["seconds"] == pytest.approx(0.0)


def test_the_projection_says_how_many_judging_jobs_at_once_the_budget_needs() -> None:
    shape = {"answers": 3000, "correct": 1200, "problems": 200, "models": 15}
    rates = {"exclusive_per_timed_answer_s": 1.5, "exclusive_per_baseline_s": 5.0, "evaluation_s_per_answer": 4.0,
             "baseline_s_per_baseline": 12.0, "job_fixed_s": 12.0, "job_answer_s": 5.0, "judging_concurrency": 2.0}
    projection = project(shape, rates)
    job_seconds = 200 * (12.0 + 15 * 5.0)  # each problem's judging job: its fixed part and 15 answers
    assert projection["judging_s"] == round(job_seconds / 2.0)
    assert projection["judging_concurrency_needed"] == round(job_seconds / BUDGET_S, 2)  # 3.22 jobs at once
    assert projection["exclusive_floor_s"] == 1200 * 1.5 + 200 * 5.0
    assert projection["wall_s"] == max(projection["judging_s"], 200 * 12.0, 2800) and not projection["fits_90_min"]


def test_the_memory_bounds_admit_the_jobs_that_fit_together_from_each_job_in_turn() -> None:
    bounds = {"evaluations": 4, "mem_mb": 100, "gpu_mem_gb": 10}
    assert admitted_concurrency([Memory(20, 2)] * 6, bounds) == 4  # the slots bound small jobs
    # From each of the three: the large job runs alone, the two small ones together (and the large one after them
    # does not fit).
    assert admitted_concurrency([Memory(60, 2), Memory(30, 2), Memory(500, 1)], bounds) == pytest.approx(4 / 3)
    assert admitted_concurrency([Memory(10, 6), Memory(10, 6)], bounds) == 1  # the card's bound
    # A job asking more than the card is clipped to it, as Snakemake clips it: one asking none still fits beside.
    assert admitted_concurrency([Memory(10, 50), Memory(10, 0)], bounds) == 2
    with pytest.raises(ValueError):
        admitted_concurrency([], bounds)


def test_each_level_s_judging_runs_at_most_as_many_jobs_at_once_as_its_memory_admits() -> None:
    shape = {"answers": 3000, "correct": 1200, "problems": 200, "models": 15, "problems_by_level": {"1": 100, "2": 100}}
    rates = {"exclusive_per_timed_answer_s": 1.5, "exclusive_per_baseline_s": 5.0, "evaluation_s_per_answer": 4.0,
             "baseline_s_per_baseline": 12.0, "job_fixed_s": 12.0, "job_answer_s": 5.0, "judging_concurrency": 3.0}
    projection = project(shape, rates, {"1": 1.5, "2": 4.0})
    job_s = 12.0 + 15 * 5.0
    assert projection["judging_by_level_s"] == {"1": round(100 * job_s / 1.5), "2": round(100 * job_s / 3.0)}
    assert projection["judging_s"] == round(100 * job_s / 1.5 + 100 * job_s / 3.0)
    assert projection["judging_s"] > project(shape, rates)["judging_s"]


def test_at_the_study_s_shape_the_default_batch_lets_an_h200_host_judge_four_level_2_problems_at_once(
        kb_dir: Path) -> None:
    # 15 models: each evaluate job declares the answer processes it keeps alive. With the default batch (4) nearly
    # every run of four consecutive level-2 problems fits an H200 host's bounds; with a batch of 15, as before, a
    # third of the slots went unused.
    default = study_admission(kb_dir, ["1", "2"], 15, 128.0, 139.0, None)
    batch_of_15 = study_admission(kb_dir, ["1", "2"], 15, 128.0, 139.0, 15)
    assert default["2"] >= 3.9 and batch_of_15["2"] < 3.0
    assert default["1"] > batch_of_15["1"]


def pipeline_call(wall_s: float, *, timed_out: bool, summary_json: bool) -> dict:
    return {"pipeline": [{"wall_s": wall_s, "timed_out": timed_out, "summary_json": summary_json}]}


def test_a_resumed_pipeline_run_s_wall_adds_its_cut_off_calls_to_the_last() -> None:
    calls = [pipeline_call(471.4, timed_out=True, summary_json=False),
             pipeline_call(103.1, timed_out=False, summary_json=True)]
    assert pipeline_wall(calls) == pytest.approx(574.5)
    assert pipeline_wall(calls[1:]) == pytest.approx(103.1)


def test_a_pipeline_run_s_calls_are_refused_unless_only_the_last_ended_on_its_own() -> None:
    finished = pipeline_call(300.0, timed_out=False, summary_json=True)
    cut = pipeline_call(471.4, timed_out=True, summary_json=False)
    with pytest.raises(SystemExit, match="call 1 of 2 was not cut off"):
        pipeline_wall([finished, finished])  # two whole runs are not one run's calls
    with pytest.raises(SystemExit, match="did not reach summary.json"):
        pipeline_wall([cut, cut])


def test_autotune_windows_say_how_many_a_shorter_linger_would_split() -> None:
    windows = [span("baseline_autotune", 0.0, 1.0, benchmarks=5, longest_gap_s=0.03),
               span("baseline_autotune", 2.0, 2.1, benchmarks=1, longest_gap_s=0.0),
               span("baseline_autotune", 3.0, 4.0, benchmarks=4, longest_gap_s=0.08)]
    assert autotune_windows(windows) == {"windows": 3, "benchmarks": 10,
                                         "split_at_linger_s": {"0.02": 2, "0.05": 1}}
    older = [span("baseline_autotune", 0.0, 1.0)]  # a timeline from before the lines counted their benchmarks
    assert autotune_windows(older)["benchmarks"].startswith("not recorded")


def test_each_forward_bound_reports_the_margin_the_measured_peaks_need() -> None:
    # bench/forward_bounds.py: two problems of 1 GiB inputs; the first peaks 2 GiB above what its sizes give, the
    # second 0.5 GiB above its traced bound (1.5 x 2 GiB traced + 2 x 1 GiB inputs).
    from forward_bounds import margins

    from workflow_scripts.evaluation.resources import GIB, Sizes

    rows = [{"sizes": Sizes(GIB, 0, GIB, 8 * GIB), "peak_gib": 3 + 2 + 2.0},
            {"sizes": Sizes(GIB, 0, GIB, 2 * GIB), "peak_gib": 3 + 2 + 0.5}]
    found = margins(rows)
    assert found["sizes_bound_needs_gib"] == 2.0 and found["traced_bound_needs_gib"] == 0.5
    # the traced bound (1.5 GiB margin) is the lesser only for the second (6.5 < 9.0; the first: 15.5 > 9.0)
    assert found["traced_is_lesser"] == 1 and found["problems"] == 2


# Snakemake 9.27's log of a local run, cut to what bench/declared_resources.py reads: two baselines of 6 GiB from second
# 0 (one to second 10, one to second 20) and an evaluation of 8 GiB from second 10 to 20, on a GPU bounded at 16 GiB.
SNAKEMAKE_LOG = """Provided cores: 4
Rules claiming more threads will be scaled down.
Provided resources: baselines=Resource("baselines", 2), gpu_mem_gb=Resource("gpu_mem_gb", 16)
Select jobs to execute...
Execute 2 jobs...

[Mon Dec  7 17:00:00 2026]
localrule baseline:
    jobid: 1
    wildcards: level=2, problem_id=14
    priority: 5
    threads: 2
    resources: tmpdir=/tmp, mem_mb=8000, mem=8 GB, runtime=40, baselines=1, gpu=1, gpu_mem_gb=6

[Mon Dec  7 17:00:00 2026]
localrule baseline:
    jobid: 2
    threads: 2
    resources: tmpdir=/tmp, baselines=1, gpu_mem_gb=6
[Mon Dec  7 17:00:10 2026]
Finished jobid: 1 (Rule: baseline)
1 of 3 steps (33%) done

[Mon Dec  7 17:00:10 2026]
localrule evaluate:
    jobid: 3
    resources: tmpdir=/tmp, evaluations=1, gpu_mem_gb=8
[Mon Dec  7 17:00:20 2026]
Finished jobid: 2 (Rule: baseline)
[Mon Dec  7 17:00:20 2026]
Finished jobid: 3 (Rule: evaluate)
"""


def test_declared_resources_say_how_long_the_bounds_were_full_and_the_wall_they_need() -> None:
    bounds, jobs = parse_log(SNAKEMAKE_LOG)
    assert bounds == {"_cores": 4, "baselines": 2, "gpu_mem_gb": 16}
    assert [(job.rule, job.end - job.start) for job in jobs] == [("baseline", 10), ("baseline", 20), ("evaluate", 10)]
    report = usage(bounds, jobs)
    assert report["wall_s"] == 20 and report["jobs"] == report["jobs_finished"] == 3
    memory = report["resources"]["gpu_mem_gb"]
    # 12 GiB declared over seconds 0-10, 14 over 10-20: 260 GiB-s; 90% of 16 is 14.4, reached never.
    assert memory["wall_needed_s"] == pytest.approx(260 / 16) and memory["mean_share"] == pytest.approx(260 / 20 / 16)
    assert memory["seconds_at_least_90_percent"] == 0
    assert memory["by_rule"]["evaluate"] == {"jobs": 1, "job_seconds": 10, "amount_seconds": 80}
    cores = report["resources"]["_cores"]  # threads: 2 + 2 over seconds 0-10 (full), 2 + 1 after
    assert cores["seconds_at_least_90_percent"] == 10 and cores["wall_needed_s"] == pytest.approx((40 + 30) / 4)
    assert report["resources"]["baselines"]["seconds_at_least_90_percent"] == 10


def test_a_job_that_failed_or_never_ended_holds_its_resources_until_then() -> None:
    # Cut off at 17:00:15: the first baseline's job is stopped (an Error in rule block naming it), the second and
    # the evaluation never end in the log, whose last stamp ends them. A later run in the same log starts again.
    cut = SNAKEMAKE_LOG.split("[Mon Dec  7 17:00:20 2026]")[0].replace("Finished jobid: 1 (Rule: baseline)", "")
    cut += "[Mon Dec  7 17:00:15 2026]\nError in rule baseline:\n    message: None\n    jobid: 1\n"
    bounds, jobs = parse_log("Building DAG of jobs...\n" + SNAKEMAKE_LOG + "Building DAG of jobs...\n" + cut)
    assert [(job.rule, job.ended, job.end - job.start) for job in jobs] == [
        ("baseline", "failed", 15), ("baseline", "unfinished", 15), ("evaluate", "unfinished", 5)]
    report = usage(bounds, jobs)
    assert (report["jobs_finished"], report["jobs_failed"], report["jobs_unfinished"]) == (0, 1, 2)
    assert report["resources"]["gpu_mem_gb"]["wall_needed_s"] == pytest.approx((6 * 15 + 6 * 15 + 8 * 5) / 16)


def test_a_log_without_jobs_is_refused() -> None:
    with pytest.raises(ValueError, match="no job"):
        usage({"gpu": 1}, parse_log(SNAKEMAKE_LOG.split("[Mon Dec  7 17:00:00 2026]")[0])[1])


def test_answer_phases_divide_each_phase_by_the_answers_it_applies_to() -> None:
    evaluations = {
        "a/1.json": {"phases_s": {"answer_wall_s": 10.0, "stepped_aside_s": 4.0, "timing_s": 1.0,
                                  "timing_reference_s": 0.5, "answer_gpu_held_s": 3.0, "cpu_beside_timing_s": 2.0},
                     "protocol": {"beside_others_timing": "locked_running"}},
        "b/1.json": {"phases_s": {"answer_wall_s": 6.0, "stepped_aside_s": 2.0},
                     "protocol": {"beside_others_timing": "locked_running"}},
        "c/1.json": {"phases_s": {"answer_wall_s": 2.0}, "protocol": {}},
    }
    found = answer_phases(evaluations)
    assert (found["answers"], found["answers_timed"], found["answers_held_running"]) == (3, 1, 1)
    assert found["per_answer_s"]["answer_wall_s"] == 6.0 and found["per_answer_s"]["stepped_aside_s"] == 2.0
    assert found["per_answer_s"]["answer_gpu_held_s"] == 1.0 and found["per_answer_s"]["load_s"] == 0.0
    assert found["per_timed_answer_s"] == {"timing_s": 1.0, "timing_reference_s": 0.5, "gpu_lock_wait_s": 0.0,
                                           "answer_stopped_s": 0.0}
    assert found["beside_others_timing"] == {"None": 1, "locked_running": 2}
    assert found["problems"] == 1 and found["per_problem_s"]["reference_prepare_s"] == 0.0


def test_answer_phases_take_a_problem_s_preparation_once_whichever_models_judged_it() -> None:
    evaluations = {f"{model}/level2_{problem}.json": {"phases_s": {"reference_prepare_s": seconds,
                                                                    "prepare_seeded_inputs_s": seconds / 2}}
                   for model in ("a", "b", "c") for problem, seconds in ((1, 6.0), (2, 2.0))}
    found = answer_phases(evaluations)
    assert found["problems"] == 2 and found["answers"] == 6
    assert found["per_problem_s"]["reference_prepare_s"] == 4.0  # (6 + 2) / 2, not three times each
    assert found["per_problem_s"]["prepare_seeded_inputs_s"] == 2.0 and found["per_problem_s"]["prepare_timing_s"] == 0
