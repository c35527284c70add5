"""Issue 34's comparison: the whole DAG against KernelBench's own harness doing the same work, in one session.

The same configuration drives both sides: its suite (``suite.path``, ``suite.levels``, ``suite.only``) and its
models (``reference``: the problem's code renamed ModelNew; ``cached``: a completions folder of
``level<L>_<id>.txt``, the code taken from the completion as the pipeline takes it).

- ``--side pipeline``: ``snakemake --configfile CONFIG <--snakemake-args>`` from an empty results folder to
  summary.json, baselines included (``--fresh`` removes the configuration's results folder and store first); then
  the run's GPU usage table (busy share after the first minute) and the evaluate jobs' waits for their own
  answers' locks (``answer_lock_waits``: slots held idle). Cut off after ``--pipeline-timeout-s``, a later
  call without ``--fresh`` (on the same warm machine) goes on.
- ``--side kernelbench``: KernelBench's harness (bench/kernelbench_harness.py, one fresh process per job) on every
  answer (``eval_kernel_against_ref``) and every problem (``measure_ref_program_time`` eager and max-autotune),
  ``--parallel`` processes at a time, each holding one lock file's exclusive flock while KernelBench times (a capable
  user's four processes under a GPU lock: loading, input building and correctness run side by side, and another
  process's correctness can run during a timing; max-autotune compiles lazily in KernelBench's warm-up, so inside
  the lock). Each job's record goes to ``kernelbench.jsonl`` as it ends; a cut-off call resumes
  from it (the walls of the calls add up).

Both write ``<out>/dag_vs_kernelbench.json``, each side its own key. On the device, the answers come from public
repositories fetched and carried in an ignored folder (never committed).

    python3 bench/dag_vs_kernelbench.py --config CONFIG --out $OUT --side pipeline --fresh
    python3 bench/dag_vs_kernelbench.py --config CONFIG --out $OUT --side kernelbench --kb-src .kb/kbsrc
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
sys.path.insert(0, str(ROOT / "bench"))

import kernelbench_harness  # noqa: E402

from workflow_scripts.analysis.extract import extract_code  # noqa: E402
from workflow_scripts.core import configuration  # noqa: E402
from workflow_scripts.generation.replay import rename_reference_model  # noqa: E402
from workflow_scripts.suite.kernelbench import problem_files  # noqa: E402

BASELINES = {"eager": ("--baseline",), "compile": ("--baseline", "--compile")}


@dataclass(frozen=True)
class HarnessJob:
    key: str  # "<level>_<id>:<model or baseline kind>"
    problem: Path
    answer: Path | None  # None: a baseline
    extra: tuple[str, ...]


def harness_jobs(config: dict, root: Path, answers_dir: Path) -> list[HarnessJob]:
    """Per problem its two baselines, then every model's answer that has code (a missing or code-less completion is
    no work for KernelBench's harness either)."""
    suite = config["suite"]
    files = problem_files(root / suite["path"], suite.get("levels", [1, 2]), suite.get("only"))
    jobs = []
    for (level, pid), path in files.items():
        problem = Path(path)
        jobs += [HarnessJob(f"{level}_{pid}:{kind}", problem, None, extra) for kind, extra in BASELINES.items()]
        for model, entry in config["models"].items():
            code = answer_code(entry, root, problem, level, pid)
            if code is None:
                continue
            answer = answers_dir / f"{model}_level{level}_{pid}.py"
            answer.write_text(code)
            jobs.append(HarnessJob(f"{level}_{pid}:{model}", problem, answer, ()))
    return jobs


def answer_code(entry: dict, root: Path, problem: Path, level: int, pid: int) -> str | None:
    if entry["kind"] == "reference":
        return rename_reference_model(problem.read_text())
    if entry["kind"] == "cached":
        completion = root / entry["completions"] / f"level{level}_{pid}.txt"
        return extract_code(completion.read_text()) if completion.exists() else None
    raise SystemExit(f"model kind {entry['kind']!r}: this bench knows reference and cached models")


def run_kernelbench(config: dict, root: Path, out: Path, kb_src: Path, parallel: int, timeout_s: float) -> dict:
    records = out / "kernelbench.jsonl"
    done = {json.loads(line)["key"] for line in records.read_text().splitlines()} if records.exists() else set()
    write = threading.Lock()
    lock_file = out / "kernelbench_gpu.lock"

    call_start = time.time()

    def run(job: HarnessJob) -> None:
        t0 = time.monotonic()
        try:
            record = kernelbench_harness.run_in_process(kb_src, job.problem, job.answer, timeout_s, *job.extra,
                                                        "--gpu-lock", str(lock_file))
        except subprocess.TimeoutExpired:
            record = {"error": f"killed after {timeout_s:.0f} s"}
        with write, records.open("a") as handle:
            # the call's start and this job's end: a call cut off before its summary still has its wall
            handle.write(json.dumps({"key": job.key, "wall_s": round(time.monotonic() - t0, 2),
                                     "call_start": call_start, "end": time.time(), **record}) + "\n")

    with tempfile.TemporaryDirectory(prefix="dag-vs-kb-") as tmp:
        jobs = [j for j in harness_jobs(config, root, Path(tmp)) if j.key not in done]
        t0 = time.monotonic()
        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(run, jobs))
        wall = time.monotonic() - t0
    lines = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    calls: dict[float, float] = {}
    for r in lines:
        calls[r["call_start"]] = max(calls.get(r["call_start"], 0.0), r["end"] - r["call_start"])
    return {"call_wall_s": round(wall, 1), "wall_s_all_calls": round(sum(calls.values()), 1),
            "jobs_this_call": len(jobs), "jobs_recorded": len(lines),
            "answers": sum(":" in r["key"] and r["key"].split(":")[1] not in BASELINES for r in lines),
            "failed_jobs": sorted(r["key"] for r in lines if r.get("error")), "parallel": parallel,
            "job_wall_s_sum": round(sum(r["wall_s"] for r in lines), 1)}


def run_pipeline(config_paths: list[Path], config: dict, root: Path, out: Path, snakemake_args: str, fresh: bool,
                 timeout_s: float) -> dict:
    """The run, its output streamed to ``<out>/snakemake.log``; after ``timeout_s`` its whole process group is
    stopped (the jobs too: none may keep the GPU), and a later call without ``fresh`` goes on from the files made
    (the default profile reruns incomplete jobs); the walls of the calls add up."""
    results = root / config["results_dir"]
    if fresh:
        for folder in (results, root / config["store"]):
            if folder.resolve().is_relative_to(root.resolve()):
                shutil.rmtree(folder, ignore_errors=True)
    command = [sys.executable, "-m", "snakemake", "--configfile", *map(str, config_paths), *shlex.split(snakemake_args)]
    t0, started = time.monotonic(), time.time()
    sampling = threading.Event()
    sampler = threading.Thread(target=_sample_host, args=(out / "host_load.jsonl", sampling), daemon=True)
    sampler.start()
    with (out / "snakemake.log").open("a") as log:
        run = subprocess.Popen(command, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: int | None = run.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGTERM)  # Snakemake stops its jobs and marks them incomplete
            try:
                run.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
            returncode = None
    wall = time.monotonic() - t0
    sampling.set()
    sampler.join()
    summary = results / "summary.json"
    # When this call wrote summary.json, from its start: the whole DAG's wall even where the call's limit came as
    # Snakemake was exiting (s27: summary.json at 551 s, the limit at 555 s).
    written = summary.stat().st_mtime - started if summary.exists() else None
    return {"command": shlex.join(command), "returncode": returncode, "timed_out": returncode is None,
            "wall_s": round(wall, 1), "summary_json": summary.exists(),
            "summary_json_after_s": round(written, 1) if written is not None and written >= 0 else None,
            "results_archive": _archive(results, root, root / config["store"], out / "dag_results.tgz"),
            "gpu_usage": _usage(results, out), "answer_lock_waits": answer_lock_waits(results)}


def answer_lock_waits(results: Path, idle_s: float = 1.0) -> dict:
    """How long evaluate jobs waited for their own answers' locks (each log's line, stages/evaluate.py), their
    evaluation slots idle meanwhile: jobs that logged it, those that waited over ``idle_s``, and the seconds in all."""
    from workflow_scripts.stages.evaluate import logged_lock_waits

    waits = [wait for log in results.glob("logs/evaluations/*/*.log")
             for wait in logged_lock_waits(log.read_text(errors="replace"))]
    return {"jobs": len(waits), f"over_{idle_s:g}_s": sum(wait > idle_s for wait in waits),
            "seconds": round(sum(waits), 1)}


def _archive(results: Path, root: Path, store: Path, archive: Path) -> str:
    """The results folder as the run left it, named as from ``root`` where it is inside it, without the store and the
    lock folder (the records a reader checks; the store's copies would double the size); what became of it, for the
    call's record (a failure never costs the record)."""
    if not results.is_dir():
        return f"none: {results} does not exist"
    left_out = {store.resolve(), (results / ".locks").resolve()}
    try:
        with tarfile.open(archive, "w:gz") as tar:
            name = results.relative_to(root) if results.resolve().is_relative_to(root.resolve()) else Path(results.name)
            tar.add(results, arcname=str(name), filter=lambda member: (
                None if (results / Path(member.name).relative_to(name)).resolve() in left_out else member))
    except (OSError, tarfile.TarError) as e:
        return f"failed: {e}"
    return archive.name


def _usage(results: Path, out: Path) -> list[dict]:
    """The run's GPU usage: the rule's table, or (a call cut off before the rule ran) the same reading of the lines
    the jobs wrote so far (scoring/gpu_timeline.py); the raw lines go to ``out`` either way."""
    import pandas as pd

    from workflow_scripts.core.records import TIMELINE_FILE
    from workflow_scripts.scoring.gpu_timeline import load_spans, usage

    locks = results / ".locks"
    for timeline in locks.glob(f"*/{TIMELINE_FILE}"):
        shutil.copy(timeline, out / f"timeline_{timeline.parent.name}.jsonl")
    table = results / "tables" / "gpu_usage.parquet"
    found = pd.read_parquet(table) if table.exists() else usage(load_spans(locks))
    return json.loads(found.to_json(orient="records"))


def _sample_host(path: Path, stop: threading.Event, every_s: float = 5.0) -> None:
    """The host's CPU use and load every ``every_s`` while the pipeline runs (is the run bound by the host or by
    the GPU?), one JSON line each."""
    import psutil

    psutil.cpu_percent()
    with path.open("a") as handle:
        while not stop.wait(every_s):
            memory = psutil.virtual_memory()
            handle.write(json.dumps({"time": round(time.time(), 1), "cpu_percent": psutil.cpu_percent(),
                                     "load_1m": os.getloadavg()[0], "memory_used_gib": round(memory.used / 2**30, 1)})
                         + "\n")
            handle.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, nargs="+", required=True,
                        help="the configuration, and overlays merged over it (config/yield_gpu.yaml)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--side", choices=("pipeline", "kernelbench"), required=True)
    parser.add_argument("--kb-src", type=Path, help="KernelBench's source at the pinned revision (kernelbench side)")
    parser.add_argument("--parallel", type=int, default=4, help="KernelBench harness processes at a time")
    parser.add_argument("--timeout-s", type=float, default=900, help="per KernelBench harness process")
    parser.add_argument("--pipeline-timeout-s", type=float, default=500, help="the pipeline's run in this call")
    parser.add_argument("--snakemake-args", default="--cores all",
                        help="the pipeline's command line after --configfile")
    parser.add_argument("--fresh", action="store_true", help="pipeline: empty results folder and store first")
    args = parser.parse_args()
    config = configuration.load(args.config)  # merged as Snakemake merges its --configfile values
    args.out.mkdir(parents=True, exist_ok=True)
    if args.side == "kernelbench" and args.kb_src is None:
        parser.error("--side kernelbench needs --kb-src")
    result = (run_pipeline(args.config, config, ROOT, args.out, args.snakemake_args, args.fresh,
                           args.pipeline_timeout_s) if args.side == "pipeline"
              else run_kernelbench(config, ROOT, args.out, args.kb_src, args.parallel, args.timeout_s))
    summary_path = args.out / "dag_vs_kernelbench.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary.setdefault(args.side, []).append(result)
    summary_path.write_text(json.dumps(summary, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
