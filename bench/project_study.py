"""The whole study's wall on one GPU, projected from one measured whole-DAG run (issue 34, done-when 4).

    python3 bench/project_study.py --timeline T.jsonl --results RESULTS_DIR [--published P.json] [--out F.json]
        [--kernelbench CHECKOUT [--host-gib 128] [--card-gib 139] [--prestart N]]

``--timeline``: the run's ``timeline_<host>.jsonl`` (``bench/dag_bench_run.sh`` copies it out of
``<results>/.locks/<host>/``); ``--results``: its results folder (``dag_results.tgz`` unpacked: ``evaluations/`` and
``baselines/``); ``--published``: the study's results file (``../shared/published/results.json``), which gives the
study's shape: answers (models x problems), correct answers (only those are timed) and problems (one baseline each).

What the run gives, per unit of work (the inputs, all written to the output):
- ``exclusive_per_timed_answer_s``: the evaluations' exclusive leases (``lease_exclusive``, purpose evaluate,
  overlaps once) over the answers timed (their ``timing_answer`` blocks); the placement audits ride along;
- ``exclusive_per_baseline_s``: the baselines' exclusive leases over the problems whose baselines ran;
- ``evaluation_s_per_answer``: the evaluations' span on the GPU (first evaluate lease to last) over the answers judged
  (the run's evaluation JSON files), at the run's concurrency;
- ``baseline_s_per_baseline``: the baselines' span over the baselines that ended, at the run's slots;
- the judging jobs' shape (one job per problem judges every model's answer against one reference side):
  ``job_fixed_s``, the median over problems of the job's ``evaluate_total_s`` less its answers' ``answer_wall_s``
  (lease, reference side, processes' start, close); ``job_answer_s``, the mean ``answer_wall_s`` (load, correctness,
  timing for the correct ones, the waits for the GPU); ``judging_concurrency``, the judging jobs' seconds over the
  evaluations' span (how many judged at once on average).

The projection (each a bound the study's wall cannot beat at the run's rates and concurrency):
- ``exclusive_floor_s`` = correct answers x exclusive per timed answer + problems x exclusive per baseline: the GPU held
  alone, whatever the scheduling;
- ``evaluations_s`` = answers x evaluation seconds per answer, which carries the run's own answers per problem (a
  job's fixed part spread over 4 answers, say); ``judging_s`` = problems x (job_fixed_s + the study's answers per
  problem x job_answer_s) / judging_concurrency: the same work at the study's answers per problem (15), the
  concurrency and the per-answer waits as measured (the store-reuse jobs of the other models, a second or two of a
  slot each, not counted); ``baselines_s`` = problems x baseline seconds per baseline; ``wall_s`` = the largest of
  the floor, ``judging_s`` and ``baselines_s`` (the run overlapped evaluations and baselines; a study does too);
  ``judging_concurrency_needed``: the judging jobs at once that would bring ``judging_s`` within the budget at the
  run's per-job and per-answer costs (which themselves grow with the waits more jobs bring).
A run of level-2 problems only stands in for level 1 as well: level 1's multi-GB problems cost more per answer, so the
projection is a lower bound there.

With ``--kernelbench`` (a checkout: every problem of levels 1 and 2 sized on the meta device), the judging is also
bounded by what the run's memory bounds admit at the study's shape, which a run of fewer models does not show: an
evaluate job declares the memory of the answer processes it keeps alive (``resources.answer_processes``: the batch of
``EvalConfig.prestart`` and the one judged, at most one per model), so at 15 models it can declare more than at 4.
``admitted_concurrency``: per level, the evaluate jobs the bounds of a local run on one GPU
(``resources.host_resources`` for a host of ``--host-gib`` and a card of ``--card-gib``: an H200 host by default) let
run at once by their declared memory, at most its evaluation slots, taken in the suite's order from each problem in
turn (the mean); the level's judging then runs at the lesser of the measured and the admitted concurrency
(``judging_by_level_s``, and ``judging_s``/``wall_s`` with it). ``--prestart`` declares another batch than the
default's (the comparison). A study's job starts each answer's process a batch of answers ahead of it (one more as
each answer is taken up: several seconds to get ready), where the run's 4-answer jobs started all of theirs while the
problem was prepared; a process still starting when its turn comes would cost the study more than the run measured.
Prints a table; ``--out`` writes the JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from workflow_scripts.core.intervals import covered_seconds  # noqa: E402
from workflow_scripts.evaluation.config import EvalConfig  # noqa: E402
from workflow_scripts.evaluation.resources import (GIB, Memory, Sizes, evaluate_memory,  # noqa: E402
                                                   host_resources, sizes_of)

BUDGET_S = 90 * 60  # the done-when: the whole study in 90 minutes


def study_shape(published: Path) -> dict[str, Any]:
    """Answers, correct answers and problems of the published study (every model, levels overall), and its problems
    per level."""
    data = json.loads(published.read_text())
    models = list(data["models"].values())
    overall = [model["levels"]["overall"] for model in models]
    levels = sorted(level for level in models[0]["levels"] if level != "overall")
    by_level = {level: int(models[0]["levels"][level]["n"]) for level in levels}
    problems = int(data["benchmark"]["problems"])
    if sum(by_level.values()) != problems:
        raise SystemExit(f"{published}: the levels' problems {by_level} do not add up to the benchmark's {problems}")
    return {"answers": sum(int(o["n"]) for o in overall), "correct": sum(int(o["correct"]) for o in overall),
            "problems": problems, "models": len(overall), "problems_by_level": by_level}


def admitted_concurrency(declared: Sequence[Memory], bounds: Mapping[str, int]) -> float:
    """The evaluate jobs a local run's ``bounds`` (``resources.host_resources``) let run at once by their declared
    memory, at most its ``evaluations`` slots: from each job in turn, the jobs after it (in order, wrapping) that fit
    together beside it, each clipped to the bound as Snakemake clips it; the mean over the starting jobs. Pessimistic
    where a large job follows small ones: Snakemake's scheduler may pass it over for smaller jobs after it."""
    if not declared:
        raise ValueError("no jobs to admit")
    slots = bounds.get("evaluations", 1)
    mem_bound, gpu_bound = bounds.get("mem_mb", math.inf), bounds.get("gpu_mem_gb", math.inf)
    counts = []
    for start in range(len(declared)):
        mem = gpu = 0.0
        taken = 0
        for job in [*declared[start:], *declared[:start]][:slots]:
            job_mem, job_gpu = min(job.mem_mb, mem_bound), min(job.gpu_mem_gb, gpu_bound)
            if taken and (mem + job_mem > mem_bound or gpu + job_gpu > gpu_bound):
                break
            mem, gpu, taken = mem + job_mem, gpu + job_gpu, taken + 1
        counts.append(taken)
    return sum(counts) / len(counts)


def study_admission(kernelbench: Path, levels: Sequence[str], models: int, host_gib: float, card_gib: float,
                    prestart: int | None) -> dict[str, float]:
    """``admitted_concurrency`` for each of ``levels`` of a KernelBench checkout, each problem's evaluate job judging
    ``models`` answers on one GPU of ``card_gib`` in a host of ``host_gib``, with the CUDA defaults (``prestart``:
    another batch). The evaluations alone: baselines running beside them take more of the bounds."""
    evaluation = {"device": "cuda", "prestart": prestart}
    bounds = host_resources("cuda", ["0"], lambda _: card_gib, int(host_gib * GIB))
    admitted = {}
    for level in levels:
        problems = level_sizes(kernelbench / "KernelBench" / f"level{level}")
        if not problems:
            raise SystemExit(f"{kernelbench}: no problems of level {level} "
                             "(a KernelBench checkout's KernelBench/level<N>)")
        declared = [evaluate_memory(sizes, evaluation, models) for sizes in problems]
        admitted[level] = round(admitted_concurrency(declared, bounds), 2)
    return admitted


@functools.cache
def level_sizes(folder: Path) -> tuple[Sizes | None, ...]:
    """The sizes of a level's problems on the meta device, in the suite's order (None: a problem that does not
    build there, whose job declares the fallback)."""
    from workflow_scripts.suite.sizes import problem_sizes  # torch: only where a checkout is sized

    problems = sorted(folder.glob("*.py"), key=lambda path: int(path.name.split("_")[0]))
    return tuple(sizes_of(problem_sizes(problem)) for problem in problems)


def timeline_lines(timeline: Path) -> list[dict]:
    """The intervals of a run's ``timeline_<host>.jsonl``, one dict per line."""
    return [json.loads(line) for line in timeline.read_text().splitlines() if line.strip()]


def run_rates(timeline: Path, results: Path) -> dict[str, float | int]:
    """The run's measured costs per unit of work (see the module's docstring)."""
    lines = timeline_lines(timeline)

    def spans(activity: str, purpose: str | None = None) -> list[tuple[float, float]]:
        return [(e["start"], e["end"]) for e in lines
                if e["activity"] == activity and (purpose is None or e.get("purpose") == purpose)]

    timed = {(e.get("problem"), e.get("answer")) for e in lines if e["activity"] == "timing_answer"}
    baselines_ran = {e.get("problem") for e in lines if e["activity"].startswith("baseline_")}
    evaluate = [s for kind in ("lease_shared", "lease_exclusive", "lease_wait") for s in spans(kind, "evaluate")]
    baseline = [s for kind in ("lease_shared", "lease_exclusive", "lease_wait", "lease_yielded")
                for s in spans(kind, "baseline")]
    answers = len(list((results / "evaluations").glob("*/*.json")))
    baselines_done = len(list((results / "baselines").glob("*.json")))
    if not (timed and baselines_ran and evaluate and baseline and answers and baselines_done):
        raise SystemExit(f"{timeline} / {results}: the run has no timed answer, baseline or evaluation to project from")
    jobs = judging_jobs(results)
    evaluation_span = max(b for _, b in evaluate) - min(a for a, _ in evaluate)
    baseline_span = max(b for _, b in baseline) - min(a for a, _ in baseline)
    run_span = max(e["end"] for e in lines) - min(e["start"] for e in lines)
    return {
        "answers_judged": answers, "answers_timed": len(timed), "baselines": baselines_done,
        "run_span_s": round(run_span, 1),
        "exclusive_per_timed_answer_s": covered_seconds(spans("lease_exclusive", "evaluate")) / len(timed),
        "exclusive_per_baseline_s": covered_seconds(spans("lease_exclusive", "baseline")) / len(baselines_ran),
        "evaluation_span_s": round(evaluation_span, 1), "evaluation_s_per_answer": evaluation_span / answers,
        "baseline_span_s": round(baseline_span, 1), "baseline_s_per_baseline": baseline_span / baselines_done,
        "job_fixed_s": median(total - sum(walls) for total, walls in jobs.values()),
        "job_answer_s": sum(sum(walls) for _, walls in jobs.values()) / sum(len(w) for _, w in jobs.values()),
        "judging_concurrency": sum(total for total, _ in jobs.values()) / evaluation_span,
    }


def judging_jobs(results: Path) -> dict[str, tuple[float, list[float]]]:
    """Per problem judged in the run: its judging job's ``evaluate_total_s`` and each answer's ``answer_wall_s`` (the
    answers judged together share the job's total; an answer judged in a job of its own, a model whose table came
    late, counts in the job of the longest total)."""
    per_job: dict[tuple[str, float], list[float]] = {}
    for path in (results / "evaluations").glob("*/*.json"):
        phases = json.loads(path.read_text()).get("phases_s") or {}
        if "evaluate_total_s" in phases and "answer_wall_s" in phases:
            per_job.setdefault((path.stem, phases["evaluate_total_s"]), []).append(phases["answer_wall_s"])
    jobs: dict[str, tuple[float, list[float]]] = {}
    for (problem, total), walls in sorted(per_job.items()):
        longest, earlier = jobs.get(problem, (0.0, []))
        jobs[problem] = (max(total, longest), earlier + walls)
    return jobs


def project(shape: dict[str, Any], rates: dict[str, float | int],
            admitted: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The projection (the module's docstring); ``admitted``: per level, the evaluate jobs the memory bounds admit at
    once at the study's shape (``study_admission``), which bound that level's judging concurrency. The per-answer
    cost is the run's (the module's docstring: processes started ahead)."""
    floor = (shape["correct"] * rates["exclusive_per_timed_answer_s"]
             + shape["problems"] * rates["exclusive_per_baseline_s"])
    evaluations = shape["answers"] * rates["evaluation_s_per_answer"]
    per_problem = shape["answers"] / shape["problems"]
    job_s = rates["job_fixed_s"] + per_problem * rates["job_answer_s"]
    judging_job_seconds = shape["problems"] * job_s
    judging = judging_job_seconds / rates["judging_concurrency"]
    by_level = None
    if admitted is not None:
        by_level = {level: problems * job_s / min(rates["judging_concurrency"], admitted[level])
                    for level, problems in shape["problems_by_level"].items()}
        judging = sum(by_level.values())
    baselines = shape["problems"] * rates["baseline_s_per_baseline"]
    wall = max(floor, judging, baselines)
    return {"exclusive_floor_s": round(floor), "evaluations_s": round(evaluations), "judging_s": round(judging),
            **({} if by_level is None else {"judging_by_level_s": {k: round(v) for k, v in by_level.items()}}),
            "baselines_s": round(baselines),
            "wall_s": round(wall), "wall_min": round(wall / 60, 1), "fits_90_min": wall <= BUDGET_S,
            "busy_share_needed": round(floor / BUDGET_S, 3),
            "judging_concurrency_needed": round(judging_job_seconds / BUDGET_S, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeline", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--published", type=Path, default=ROOT.parent / "shared" / "published" / "results.json")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--kernelbench", type=Path, help="a KernelBench checkout: bound the judging by the memory the "
                        "study's evaluate jobs declare (admitted_concurrency)")
    parser.add_argument("--host-gib", type=float, default=128.0, help="the host's memory (default: an H200 host's)")
    parser.add_argument("--card-gib", type=float, default=139.0, help="the GPU's memory (default: an H200's)")
    parser.add_argument("--prestart", type=int, help="the batch the evaluate jobs declare (default: the CUDA default)")
    args = parser.parse_args()
    shape, rates = study_shape(args.published), run_rates(args.timeline, args.results)
    admitted = (None if args.kernelbench is None else
                study_admission(args.kernelbench, list(shape["problems_by_level"]), shape["models"], args.host_gib,
                                args.card_gib, args.prestart))
    projection = project(shape, rates, admitted)
    inputs: dict[str, Any] = {"timeline": str(args.timeline), "results": str(args.results),
                              "published": str(args.published)}
    if admitted is not None:
        batch = EvalConfig(device="cuda", prestart=args.prestart).prestart_count()
        inputs.update(kernelbench=str(args.kernelbench), host_gib=args.host_gib, card_gib=args.card_gib,
                      prestart=batch)
    record = {"inputs": inputs,
              "study": shape, "run": {k: round(v, 3) if isinstance(v, float) else v for k, v in rates.items()},
              **({} if admitted is None else {"admitted_concurrency": admitted}),
              "projection": projection}
    emit(record, ("study", "run", *(() if admitted is None else ("admitted_concurrency",)), "projection"), args.out)


def emit(record: dict, sections: tuple[str, ...], out: Path | None) -> None:
    """The record's sections printed as a table (section, key, value), and written to ``out`` as JSON if given."""
    for section in sections:
        for key, value in record[section].items():
            print(f"{section:10s} {key:30s} {value}")
    if out:
        out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
