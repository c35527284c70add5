"""The problem-centred evaluator on the GPU (issue: evaluator v2), one JSON line per measurement in
$OUT/gpu_problem_worker.jsonl, written as the run goes:

* ``big``: multi-GB level-1 problems (done-when 1): several answers to one problem (the reference as its own answer,
  twice, and an honest Triton answer from bench/kernelbench_answers/ours when there is one); per answer its verdict
  and seconds, and the problem's one-time preparation (seeded inputs built and the reference run once); with
  ``--kernelbench``, KernelBench's harness on the first answer too, after ours, its wall time recorded.
* ``spin``: honest answers evaluated alone, then the same answers beside a never-returning kernel (bench/spinning),
  in parallel jobs on the same GPU (done-when 5).
* ``calibration``: the reference as its own answer on many problems; its eager speedup as the pipeline computes it
  (against the reference timed beside it, paired timing), and with ``--with-baseline`` also against a baseline
  process timed just before (the unpaired speedup) (done-when 2). ``--parallel N`` runs N worker processes,
  worker i on GPU i mod the visible GPUs.
* ``throughput``: N answers per problem through one ProblemEvaluator on GPU 0, and KernelBench's harness
  (bench/kernelbench_harness.py) on one answer per problem in the same run (done-when 4).
* ``verdicts``: the speed verdicts and the zeros flag on answers whose truth is known (issue 35): the chain problem of
  bench/known_speedups/chain.py against answers 5% faster, as fast and 5% slower (true speedups 20/19, 1, 20/21);
  with ``--problems`` (e.g. L1_23), each problem's reference as its own answer beside the cheat suite's zeros
  answer (tests/cheats/answers/cheats/softmax_zeros.py). ``calibration_summary.py`` reads their verdicts.
* ``baselines``: each problem's eager and torch.compile (max-autotune) baselines as the pipeline's baseline stage
  measures them (issue 34: the compiled time with the compile off the exclusive lease, against an older commit's run
  through h200_worker_run.sh's ``baselines`` mode), ``--parallel`` jobs at a time on the GPU: times, compile seconds,
  the waits for exclusive windows and the autotune windows granted.
* ``scaling``: the same answers as ``throughput``, problems handed to one worker process per visible GPU, each
  leasing a GPU through the lock files as pipeline jobs do, then to one worker on the first GPU alone; the ratio
  of the two walls (done-when 4, two GPUs against one).

    python bench/gpu_problem_worker.py big --suite .kb --problems L1_19 L1_23 L1_47 --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workflow_scripts.analysis.extract import extract_code  # noqa: E402
from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answers  # noqa: E402
from workflow_scripts.evaluation.baseline import BaselineConfig, measure_baselines  # noqa: E402
from workflow_scripts.generation.replay import rename_reference_model  # noqa: E402
from workflow_scripts.scoring.rows import paired_interval  # noqa: E402
from bench import kernelbench_harness  # noqa: E402
from bench.gpu_watchdog import append_record, problem_file  # noqa: E402

SPINNER = ROOT / "bench" / "spinning" / "answer.py"
ADD = ROOT / "tests" / "cheats" / "problems" / "1_ElementwiseAdd.py"  # the problem the spinner answers
OURS = ROOT / "bench" / "kernelbench_answers" / "ours"
CHAIN_PROBLEM = ROOT / "bench" / "known_speedups" / "chain.py"
ZEROS_ANSWER = ROOT / "tests" / "cheats" / "answers" / "cheats" / "softmax_zeros.py"


def log(out: Path, record: dict) -> None:
    append_record(out / "gpu_problem_worker.jsonl", record)


def all_problems(suite: Path) -> list[str]:
    keys = []
    for level in (1, 2):
        for f in (suite / "KernelBench" / f"level{level}").glob("*.py"):
            keys.append(f"L{level}_{f.name.split('_')[0]}")
    return sorted(keys, key=lambda k: (int(k[1]), int(k.split("_")[1])))


def reference_answer(problem: Path, tmp: Path, tag: str = "") -> Path:
    path = tmp / f"{problem.stem}{tag}_reference_answer.py"
    path.write_text(rename_reference_model(problem.read_text()) + (f"\n# {tag}\n" if tag else ""))
    return path


def ours_answer(key: str, tmp: Path) -> Path | None:
    completion = OURS / f"level{key[1]}_{key.split('_')[1]}.txt"
    if not completion.exists():
        return None
    code = extract_code(completion.read_text())
    if not code:
        return None
    path = tmp / f"{key}_ours.py"
    path.write_text(code)
    return path


def timed_calls(result) -> dict:
    """The answer's and the paired reference's timed calls (ms, to 10 ns) with their block sizes; empty when the
    answer was not timed beside the reference."""
    paired = result.paired_reference or {}
    answer = (result.runtime_stats or {}).get("trials")
    reference = (paired.get("raw") or {}).get("trials_ms")
    if not answer or not reference:
        return {}
    return {"answer_trials_ms": [round(t, 5) for t in answer], "reference_trials_ms": [round(t, 5) for t in reference],
            "block_trials": paired.get("block_trials"), "reference_block_trials": paired.get("reference_block_trials")}


def summarise(result) -> dict:
    checks = (result.timing_raw or {}).get("timed_checks") or {}
    paired = (result.paired_reference or {}).get("stats") or {}
    timed = result.runtime_ms and paired.get("mean")
    interval = paired_interval(result.to_dict()) if timed else None
    return {"status": result.status, "runtime_ms": result.runtime_ms, "max_abs_diff": result.max_abs_diff,
            # the pipeline's eager speedup: the reference timed beside the answer (paired timing), means and medians
            "speedup": paired["mean"] / result.runtime_ms if timed else None,
            "median_speedup": paired["median"] / result.runtime_stats["median"] if timed else None,
            # its 95% interval, as the rows' speedup_eager_low/high (scoring/significance.py)
            "speedup_low": interval.low if interval else None, "speedup_high": interval.high if interval else None,
            # both sides' timed calls in the order they ran, and their blocks: calibration_summary re-reads the
            # interval from them by the current definition
            **timed_calls(result),
            "problem_audit": result.problem_audit,
            # out-of-memory events on the trusted side while the reference was timed (reference_timer)
            "reference_device_ooms": (result.paired_reference or {}).get("device_ooms"),
            "flags": result.flags, "error": (result.error or "")[-1200:],  # the tail holds the exception
            "host_memory": (result.protocol or {}).get("host_memory"),  # the answer tree's cap and peak
            "phases_s": {k: round(v, 3) for k, v in result.phases_s.items()},
            # the trusted side's checks on the timed calls: outputs judged, reported times against observed ones
            "timed_checks": {k: checks.get(k) for k in ("calls", "checked", "unchecked", "mismatches", "comparable",
                                                        "fresh_inputs", "fixed_inputs_reason", "excess_ms_median",
                                                        "probe_excess_ms", "excess_limit_ms", "unconfirmed",
                                                        "detail")}}


DEVICE = os.environ.get("BENCH_DEVICE", "cuda")  # BENCH_DEVICE=cpu: a smoke run of the bench itself


# --paired-reference-block, through the environment so that the calibration's spawned workers see it too
PAIRED_REFERENCE_BLOCK_ENV = "KB_BENCH_PAIRED_REFERENCE_BLOCK"


def config(**kw) -> EvalConfig:
    if os.environ.get(PAIRED_REFERENCE_BLOCK_ENV):
        kw.setdefault("paired_reference_block", int(os.environ[PAIRED_REFERENCE_BLOCK_ENV]))
    return EvalConfig(device=DEVICE, **kw)


# KernelBench's eval_kernel_against_ref builds the inputs with get_inputs() 7 times per answer (5 correctness
# trials, the timing, the excessive-speedup check), on the CPU, serially: on the multi-GB problems that is most of
# its time (anchors: L1/19 64.6 of 78.3 s).
KERNELBENCH_INPUT_BUILDS = 7


def kernelbench_input_seconds(problem: Path) -> float:
    """Seconds for one seeded get_inputs() as KernelBench's harness calls it (CPU, this process), in a fresh
    process so nothing of it stays in the bench's memory."""
    code = ("import sys, time, torch; from workflow_scripts.evaluation.reference import load_problem; "
            "m = load_problem(sys.argv[1]); torch.manual_seed(42); t = time.perf_counter(); m.get_inputs(); "
            "print(time.perf_counter() - t)")
    done = subprocess.run([sys.executable, "-c", code, str(problem)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    return float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else float("nan")


def inputs_key(problem: Path) -> str:
    """What one seeded get_inputs() costs depends on: its source and the shapes and dtypes it builds (read on the
    meta device). Problems with the same key (L1/47-53 but 50, L1/34-37, ...) share one measurement."""
    import inspect

    import torch

    from workflow_scripts.evaluation.reference import load_problem

    module = load_problem(problem)
    with torch.device("meta"):
        shapes = [(tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else repr(x)
                  for x in module.get_inputs()]
    return f"{inspect.getsource(module.get_inputs)}|{shapes}"


def run_big(args, tmp: Path) -> None:
    done = {r["problem"] for r in read_log(args.out) if r.get("bench") == "big"}
    todo = [(args.suite, args.out, k, args.kb_src if args.kernelbench else None) for k in args.problems
            if k not in done]
    # A fresh process per problem: its peak host memory (ru_maxrss) and the trusted side's peak GPU memory are that
    # problem's own, the numbers a job's memory resources are declared from.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), max_tasks_per_child=1) as pool:
        list(pool.map(big_problem, todo))


def big_problem(job: tuple[Path, Path, str, Path | None]) -> None:
    import resource

    import torch

    suite, out, key, kb_src = job
    problem = problem_file(suite, key)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        answers = [reference_answer(problem, tmp, "a"), reference_answer(problem, tmp, "b")]
        ours = ours_answer(key, tmp)
        if ours:
            answers.append(ours)
        t0 = time.monotonic()
        results = evaluate_answers(problem, answers, config(require_triton=False))
        wall = time.monotonic() - t0
        # KernelBench's own harness on the first answer, after ours (so it cannot slow ours down), in a fresh
        # process: the time the first answer is held to, measured rather than estimated.
        kernelbench = {}
        if kb_src is not None:
            t0 = time.monotonic()
            try:
                kb = kernelbench_harness.run_in_process(kb_src, problem, answers[0], timeout_s=900)
            except subprocess.TimeoutExpired:
                kb = {"error": "KernelBench's harness ran past 900 s"}
            kernelbench = {"kernelbench_wall_s": round(time.monotonic() - t0, 2),
                           "kernelbench_correct": kb.get("correctness"), "kernelbench_runtime_ms": kb.get("runtime_ms"),
                           "kernelbench_error": kb.get("error", "")[-300:]}
    memory = {"trusted_peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20), 2),
              "trusted_peak_gpu_gib": round(torch.cuda.max_memory_allocated() / (1 << 30), 2)
              if torch.cuda.is_available() else None}
    # A lower bound on KernelBench's harness time per answer (its input builds alone), measured after ours so it
    # cannot slow our run down; once per inputs_key (the first problem of a group measures it for the others).
    key_of_inputs = inputs_key(problem)
    measured = [r for r in read_log(out) if r.get("bench") == "big" and r.get("inputs_key") == key_of_inputs
                and r.get("kernelbench_get_inputs_from") is None]
    inputs_s = measured[0]["kernelbench_get_inputs_s"] if measured else kernelbench_input_seconds(problem)
    for i, (a, r) in enumerate(zip(answers, results)):
        log(out, {"bench": "big", "problem": key, "answer": a.name, "order": i, "wall_all_s": round(wall, 2),
                  "inputs_key": key_of_inputs,
                  "kernelbench_get_inputs_from": measured[0]["problem"] if measured else None,
                  "kernelbench_get_inputs_s": round(inputs_s, 2),
                  "kernelbench_lower_bound_s": round(KERNELBENCH_INPUT_BUILDS * inputs_s, 1), **kernelbench, **memory,
                  **summarise(r)})


def read_log(out: Path) -> list[dict]:
    path = out / "gpu_problem_worker.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run_spin(args, tmp: Path) -> None:
    honest = [(problem_file(args.suite, k), reference_answer(problem_file(args.suite, k), tmp)) for k in args.problems]
    cfg = config(require_triton=False, lock_dir=str(tmp / "locks"))
    alone = {}
    for problem, answer in honest:
        t0 = time.monotonic()
        r = evaluate_answers(problem, [answer], cfg)[0]
        alone[problem.name] = summarise(r)
        log(args.out, {"bench": "spin", "phase": "alone", "problem": problem.name, "wall_s": time.monotonic() - t0,
                       **alone[problem.name]})
    jobs = [(ADD, SPINNER)] + honest
    t0 = time.monotonic()

    # Each problem in its own process, as the pipeline judges them (one problem per job): torch's device binding and
    # TF32 flags are per process.
    with ProcessPoolExecutor(len(jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
        for (problem, answer), r, wall in pool.map(spin_job, [(p, a, cfg) for p, a in jobs]):
            beside, before = summarise(r), alone.get(problem.name) or {}

            def ratio(key: str, beside: dict = beside, before: dict = before) -> float | None:
                return beside[key] / before[key] if (beside.get(key) and before.get(key)) else None

            log(args.out, {"bench": "spin", "phase": "beside_spinner", "problem": problem.name, "answer": answer.name,
                           "wall_s": round(wall, 2), "since_start_s": round(time.monotonic() - t0, 2),
                           "runtime_vs_alone": ratio("runtime_ms"), "speedup_vs_alone": ratio("speedup"), **beside})


def spin_job(job: tuple[Path, Path, EvalConfig]):
    problem, answer, cfg = job
    start = time.monotonic()
    r = evaluate_answers(problem, [answer], cfg)[0]
    return (problem, answer), r, time.monotonic() - start


def run_calibration(args, tmp: Path) -> None:
    keys = args.problems or all_problems(args.suite)
    # Resuming: problems already calibrated with this headroom (records before the key was recorded had the default).
    headroom = args.headroom_us if args.headroom_us is not None else config().launch_headroom_us
    done = {r["problem"] for r in read_log(args.out) if r.get("bench") == "calibration"
            and r.get("launch_headroom_us", config().launch_headroom_us) == headroom}
    todo = [k for k in keys[args.skip:] if k not in done]
    # Problems side by side in separate processes (torch's generators are per process: a thread per problem would
    # interleave their seeded draws); worker i keeps to one GPU so a problem's baselines and answer share it.
    gpus = gpu_ids()
    chunks = [(args.suite, args.out, todo[i::args.parallel], gpus[i % len(gpus)], args.with_baseline, args.copies,
               args.headroom_us) for i in range(args.parallel)]
    with ProcessPoolExecutor(args.parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(calibrate_chunk, chunks))


def run_baselines(args, tmp: Path) -> None:
    done = {r["problem"] for r in read_log(args.out) if r.get("bench") == "baselines"}
    todo = [k for k in (args.problems or all_problems(args.suite)) if k not in done]
    jobs = [(args.suite, args.out, key) for key in todo]
    with ProcessPoolExecutor(args.parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(baseline_job, jobs))


def baseline_job(job: tuple[Path, Path, str]) -> None:
    """One problem's baselines as the baseline stage measures them (both, max-autotune), one record."""
    suite, out, key = job
    t0 = time.monotonic()
    r = measure_baselines(problem_file(suite, key), BaselineConfig(device=DEVICE, lock_dir="/tmp/bench-locks"))
    log(out, {"bench": "baselines", "problem": key, "wall_s": round(time.monotonic() - t0, 2),
              "eager_ms": r.eager_ms, "eager_status": r.eager_status, "compile_ms": r.compile_ms,
              "compile_status": r.compile_status, "compile_time_s": r.compile_time_s,
              "autotune_exclusive": (r.protocol or {}).get("autotune_exclusive"),
              "phases_s": {k: round(v, 3) for k, v in (r.phases_s or {}).items()}})


def gpu_ids() -> list[str]:
    from workflow_scripts.evaluation.gpu_lock import visible_gpus

    return visible_gpus() or ["0"]


def calibrate_chunk(job: tuple[Path, Path, list[str], str, bool, int, float | None]) -> None:
    suite, out, keys, gpu, with_baseline, copies, headroom_us = job
    headroom = {} if headroom_us is None else {"launch_headroom_us": headroom_us}
    for key in keys:
        problem = problem_file(suite, key)
        t0 = time.monotonic()
        base = BaselineConfig(device=DEVICE, run_compile=False, gpus=[gpu], lock_dir="/tmp/bench-locks")
        before = measure_baselines(problem, base) if with_baseline else None
        with tempfile.TemporaryDirectory() as tmp:
            # copies > 1: the same reference code as several answers, each in its own answer process, against one
            # trusted side: tells a per-process offset (differs between copies) from a systematic one (does not).
            answers = [reference_answer(problem, Path(tmp), f"c{i}" if copies > 1 else "") for i in range(copies)]
            results = evaluate_answers(problem, answers,
                                       config(require_triton=False, gpus=[gpu], lock_dir="/tmp/bench-locks",
                                              **headroom))
        for copy, r in enumerate(results):
            paired = ((r.paired_reference or {}).get("stats") or {}).get("mean")
            record = {"bench": "calibration", "problem": key, "gpu": gpu, "paired_eager_ms": paired,
                      "launch_headroom_us": (r.protocol.get("timing") or {}).get("launch_headroom_us"),
                      "paired_reference_block": r.protocol.get("paired_reference_block"),
                      "sm_mhz": r.fingerprint.get("sm_clock_mhz"), "wall_s": round(time.monotonic() - t0, 2),
                      **summarise(r)}
            if copies > 1:
                record.update(copy=copy, order=(r.paired_reference or {}).get("order"))
            if before is not None:  # the unpaired speedup: a baseline process timed just before
                record.update(eager_ms=before.eager_ms, speedup_vs_baseline=(before.eager_ms / r.runtime_ms)
                              if (before.eager_ms and r.runtime_ms) else None)
            log(out, record)


def run_verdicts(args, tmp: Path) -> None:
    source = CHAIN_PROBLEM.read_text()
    chains = (19, 20, 21)
    answers = []
    for n in chains:
        answers.append(tmp / f"chain{n}.py")
        answers[-1].write_text(rename_reference_model(source).replace("CHAIN = 20", f"CHAIN = {n}"))
    for n, r in zip(chains, evaluate_answers(CHAIN_PROBLEM, answers, config(require_triton=False))):
        log(args.out, {"bench": "verdicts", "problem": "chain20", "answer": f"chain{n}", "true_speedup": 20 / n,
                       **summarise(r)})
    for key in args.problems:  # degenerate problems: the zeros answer beside the honest reference
        problem = problem_file(args.suite, key)
        honest = reference_answer(problem, tmp)
        for name, r in zip(("reference", "zeros"), evaluate_answers(problem, [honest, ZEROS_ANSWER],
                                                                     config(require_triton=False))):
            log(args.out, {"bench": "verdicts", "problem": key, "answer": name, **summarise(r)})


def run_inputs_check(args, tmp: Path) -> None:
    """Diagnosis of the calibration bias: the reference as its own answer timed (a) as the evaluator does, on timing
    inputs built on the GPU from a secret seed, and (b) on KernelBench's seed-42 timing inputs built on the CPU,
    exactly the inputs the baseline is timed on; baselines before and after, all on one GPU, one at a time."""
    from workflow_scripts.evaluation.reference import ReferenceSide

    on_gpu = ReferenceSide.secret_inputs

    def on_cpu(self, seed):
        if seed != self.timing_seed:
            return on_gpu(self, seed)
        with self.seeding(seed):
            return [self._process(x, "cpu") for x in self.problem.get_inputs()]

    for key in args.problems:
        problem = problem_file(args.suite, key)
        base = BaselineConfig(device=DEVICE, run_compile=False, lock_dir="/tmp/bench-locks")
        record = {"bench": "inputs_check", "problem": key, "eager_before_ms": measure_baselines(problem, base).eager_ms}
        for variant in ("gpu_secret_seed", "cpu_seed42", "gpu_secret_seed_again"):
            ReferenceSide.secret_inputs = on_cpu if variant == "cpu_seed42" else on_gpu
            cfg = config(require_triton=False, lock_dir="/tmp/bench-locks",
                         timing_seed=42 if variant == "cpu_seed42" else None)
            r = evaluate_answers(problem, [reference_answer(problem, tmp, variant)], cfg)[0]
            record[variant] = {"ms": r.runtime_ms, "median_ms": (r.runtime_stats or {}).get("median"),
                               "status": r.status}
        ReferenceSide.secret_inputs = on_gpu
        record["eager_after_ms"] = measure_baselines(problem, base).eager_ms
        log(args.out, record)


def throughput_answers(args, key: str, tmp: Path) -> tuple[Path, list[Path]]:
    problem = problem_file(args.suite, key)
    answers = [reference_answer(problem, tmp, f"v{i}") for i in range(args.per_problem)]
    ours = ours_answer(key, tmp)
    if ours:
        answers[-1] = ours
    return problem, answers


def evaluate_problem(job: tuple[Path, list[Path], list[str] | None, str]) -> dict:
    problem, answers, gpus, lock_dir = job
    t0 = time.monotonic()
    results = evaluate_answers(problem, answers, config(require_triton=False, gpus=gpus, lock_dir=lock_dir))
    wall = time.monotonic() - t0
    return {"answers": len(answers), "wall_s": round(wall, 2), "per_answer_s": round(wall / len(answers), 2),
            "gpu": results[0].protocol.get("gpu"), "statuses": [r.status for r in results],
            "runtimes_ms": [r.runtime_ms for r in results],
            "children_batch": results[0].phases_s.get("children_batch"),
            "prepare_s": results[0].phases_s.get("reference_prepare_s"),
            # where an answer's seconds go (the first answer's include the child's start and the preparation)
            "phases_median_s": {k: round(statistics.median(r.phases_s.get(k, 0.0) for r in results), 4)
                                for k in sorted({k for r in results for k in r.phases_s})},
            # each answer's own, in order (the start gate's waits, its timing's wall time and trial times)
            "per_answer": [dict({k: round(v, 4) for k, v in sorted(r.phases_s.items())},
                                timing_wall_s=round((r.timing_raw or {}).get("wall_s_parent") or 0.0, 4),
                                trials_sum_s=round(sum((r.runtime_stats or {}).get("trials") or []) / 1e3, 4),
                                warmup_s=round(sum((r.timing_raw or {}).get("warmup_ms") or []) / 1e3, 4))
                           for r in results]}


def run_scaling(args, tmp: Path) -> None:
    """Done-when 4's second half: the same answers evaluated on every visible GPU (one worker process per GPU, each
    leasing a GPU through the lock files as pipeline jobs do), then on the first GPU alone, and the ratio of the
    two walls. All GPUs go first, so any warm-up the machine keeps (page cache, GPU clocks) favours the one-GPU
    phase: the ratio errs low. Each phase has its own lock folder, so each builds Triton's driver helpers anew."""
    gpus = gpu_ids()
    answers = {key: throughput_answers(args, key, tmp) for key in args.problems}
    count = sum(len(files) for _, files in answers.values())
    walls: dict[int, float] = {}
    for phase in ([gpus, gpus[:1]] if len(gpus) > 1 else [gpus]):
        locks = tmp / f"locks-{len(phase)}gpu"
        jobs = [(problem, files, phase, str(locks)) for problem, files in answers.values()]
        busy: dict[str, float] = {}
        t0 = time.monotonic()
        # A fresh process per problem, as each pipeline job is: a process binds to the GPU it leased first
        # (reference.bind_gpu), and the next problem's lease may be the other GPU.
        with ProcessPoolExecutor(len(phase), mp_context=multiprocessing.get_context("spawn"),
                                 max_tasks_per_child=1) as pool:
            for key, rec in zip(args.problems, pool.map(evaluate_problem, jobs)):
                busy[str(rec["gpu"])] = round(busy.get(str(rec["gpu"]), 0.0) + rec["wall_s"], 2)
                log(args.out, {"bench": "scaling", "problem": key, "gpus": phase, "since_start_s":
                               round(time.monotonic() - t0, 2), **rec})
        walls[len(phase)] = time.monotonic() - t0
        # busy_s: each GPU's problems' seconds (an idle GPU at the end shows as a shorter sum)
        log(args.out, {"bench": "scaling", "total": True, "gpus": phase, "problems": len(jobs), "answers": count,
                       "wall_s": round(walls[len(phase)], 2), "per_answer_s": round(walls[len(phase)] / count, 3),
                       "busy_s": busy})
    if len(walls) == 2:
        log(args.out, {"bench": "scaling", "summary": True, "gpus": len(gpus), "one_gpu_wall_s": round(walls[1], 2),
                       "all_gpus_wall_s": round(walls[len(gpus)], 2),
                       "speedup_over_one_gpu": round(walls[1] / walls[len(gpus)], 3)})


def run_throughput(args, tmp: Path) -> None:
    ours_s, ours_answers, kb_walls = 0.0, 0, []
    for key in args.problems:
        problem, answers = throughput_answers(args, key, tmp)
        rec = evaluate_problem((problem, answers, ["0"], str(tmp / "locks")))
        log(args.out, {"bench": "throughput", "harness": "ours", "problem": key, **rec})
        # KernelBench's harness on some of the same answers, a fresh process each as its batch evaluation runs them
        # (its cost per answer hardly depends on the answer): the first, the last (ours, where there is one) and
        # evenly between, so that one slow or fast process does not decide the problem's time.
        picks = sorted({round(i * (len(answers) - 1) / max(1, args.kb_per_problem - 1))
                        for i in range(args.kb_per_problem)})
        walls = []
        for i in picks:
            t0 = time.monotonic()
            kb = kernelbench_harness.run_in_process(args.kb_src, problem, answers[i], timeout_s=900)
            walls.append(time.monotonic() - t0)
            log(args.out, {"bench": "throughput", "harness": "kernelbench", "problem": key, "answers": 1,
                           "answer_index": i, "wall_s": round(walls[-1], 2), **kb})
        ours_s, ours_answers = ours_s + rec["wall_s"], ours_answers + rec["answers"]
        kb_walls.append(statistics.mean(walls))
        # The done-when's number so far (written after every problem: a call can be cut off).
        kb_per_answer = statistics.mean(kb_walls)
        log(args.out, {"bench": "throughput", "summary": True, "problems": len(kb_walls), "answers": ours_answers,
                       "ours_per_answer_s": round(ours_s / ours_answers, 3),
                       "kernelbench_per_answer_s": round(kb_per_answer, 3),
                       "ratio": round(ours_s / ours_answers / kb_per_answer, 3)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", choices=["big", "spin", "calibration", "throughput", "scaling",
                                          "inputs_check", "verdicts", "baselines"])
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--problems", nargs="*", default=[])
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--per-problem", type=int, default=5)
    parser.add_argument("--kb-per-problem", type=int, default=3, help="throughput: KernelBench's harness on this many "
                        "of each problem's answers (its time per answer is their mean)")
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--with-baseline", action="store_true", help="calibration: also time a baseline process "
                        "before each answer (the unpaired speedup, as before paired timing)")
    parser.add_argument("--copies", type=int, default=1, help="calibration: the reference as this many answers per "
                        "problem (separate answer processes, one trusted side)")
    parser.add_argument("--headroom-us", type=float, default=None, help="calibration: launch_headroom_us (default: "
                        "the run configuration's; 0 for the no-headroom control)")
    parser.add_argument("--kernelbench", action="store_true", help="big: also KernelBench's harness on the first "
                        "answer of each problem, after ours (its wall time, the first answer's bound)")
    parser.add_argument("--paired-reference-block", type=int, default=None, help="every evaluation's "
                        "paired_reference_block (default: EvalConfig's)")
    parser.add_argument("--kb-src", type=Path, default=ROOT / ".kb" / "kbsrc")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.paired_reference_block is not None:
        os.environ[PAIRED_REFERENCE_BLOCK_ENV] = str(args.paired_reference_block)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        {"big": run_big, "spin": run_spin, "calibration": run_calibration, "throughput": run_throughput,
         "scaling": run_scaling, "inputs_check": run_inputs_check, "verdicts": run_verdicts,
         "baselines": run_baselines}[args.bench](args, Path(tmp))


if __name__ == "__main__":
    main()
