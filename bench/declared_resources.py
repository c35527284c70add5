"""What Snakemake's resource bounds let run at once in one pipeline run, from the run's own log (issue 34: why the GPU
idles). A local run bounds ``gpu_mem_gb``, ``mem_mb``, ``gpu``, ``evaluations`` and ``baselines`` by the host
(rules/common.smk, evaluation/resources.py host_resources); a job starts only while its declared values fit beside
the running jobs'. When the declared GPU memory stays near its bound all run long, the declarations, not the GPU's
time, set the wall.

    python3 bench/declared_resources.py --log snakemake.log [--out F.json]

``--log``: Snakemake's log of the run (``bench/dag_bench_run.sh`` copies it out as ``snakemake.log``; a log holding
several runs is read from its last ``Building DAG of jobs...`` on). Read from it: the bounds (``Provided cores: N`` as
``_cores``, ``Provided resources: ...``), each job's rule, threads, resources and start (``[<date>]`` before
``localrule``), and its end (``Finished jobid``, or the stamp of its ``Error in rule`` block: a job that failed, or was
stopped when a call was cut off, held its resources until then; a job with neither ends at the log's last stamp), to
the second: a job shorter than a second may count for none. Written out: the jobs that finished, failed and never
ended, and for each bounded resource:
- ``bound``: what the run provided;
- ``mean_share``: the declared amount of the running jobs averaged over the wall, over the bound;
- ``seconds_at_least_90_percent``: how long the running jobs held 90% of the bound or more;
- ``wall_needed_s``: the declared amount-seconds of all jobs over the bound: the wall no packing can beat;
- by rule: jobs, job-seconds, and the amount-seconds.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

# Snakemake 9's log lines (requirements/lock.txt pins 9.27.1).
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
RESOURCES = re.compile(r"^\s+resources: (.*)$")
THREADS = re.compile(r"^\s+threads: (\d+)$")  # printed where more than one
CORES = re.compile(r"^Provided cores: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")
FAILED = re.compile(r"^Error in rule (\w+):$")  # its block's jobid line follows
NEW_RUN = "Building DAG of jobs..."
PROVIDED = re.compile(r'(\w+)=Resource\("\w+", (\d+)\)')
FULL_SHARE = 0.9  # "at the bound": the running jobs' declarations at 90% of it or more


@dataclass
class Job:
    rule: str
    start: float
    resources: dict[str, float] = field(default_factory=lambda: {"_cores": 1.0})
    end: float | None = None
    ended: str = "unfinished"  # "finished", "failed" (an Error in rule block), or "unfinished" (ended at the last stamp)


def parse_log(text: str) -> tuple[dict[str, int], list[Job]]:
    """The last run's bounds and its jobs (every job that started; one without an end ends at the log's last
    stamp)."""
    bounds: dict[str, int] = {}
    jobs: dict[str, Job] = {}
    stamp: float | None = None
    rule: str | None = None
    current: Job | None = None
    failing = False  # inside an Error in rule block, whose jobid line names the job that failed
    for line in text.splitlines():
        if line.startswith(NEW_RUN):  # a later run in the same log: its jobids start again
            bounds, jobs, rule, current = {}, {}, None, None
        elif line.startswith("Provided resources:"):
            bounds.update((name, int(value)) for name, value in PROVIDED.findall(line))
        elif match := CORES.match(line):
            bounds["_cores"] = int(match.group(1))  # the jobs' threads
        elif match := STAMP.match(line):
            stamp = datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y").replace(tzinfo=timezone.utc).timestamp()
            rule = current = None
            failing = False
        elif FAILED.match(line):
            failing = True
        elif (match := RULE.match(line)) and stamp is not None:
            rule = match.group(1)
        elif (match := JOBID.match(line)) and failing:
            if match.group(1) in jobs:
                jobs[match.group(1)].end, jobs[match.group(1)].ended = stamp, "failed"
            failing = False
        elif (match := JOBID.match(line)) and rule is not None and stamp is not None:
            current = jobs.setdefault(match.group(1), Job(rule, stamp))
        elif (match := THREADS.match(line)) and current is not None:
            current.resources["_cores"] = float(match.group(1))
        elif (match := RESOURCES.match(line)) and current is not None:
            current.resources.update(_numbers(match.group(1)))
        elif (match := FINISHED.match(line)) and match.group(1) in jobs and stamp is not None:
            jobs[match.group(1)].end, jobs[match.group(1)].ended = stamp, "finished"
    for job in jobs.values():
        if job.end is None:
            job.end = stamp  # still running when the log ends: a call cut off, or Snakemake killed
    return bounds, list(jobs.values())


def _numbers(listing: str) -> dict[str, float]:
    found = {}
    for item in listing.split(", "):
        name, _, value = item.partition("=")
        try:
            found[name] = float(value)
        except ValueError:
            continue  # tmpdir=/tmp, mem=2 GB: not a bounded amount
    return found


def usage(bounds: dict[str, int], jobs: list[Job]) -> dict:
    """Each bounded resource's use by the run's jobs (see the module's docstring)."""
    ended = [job for job in jobs if job.end is not None]
    if not ended:
        raise ValueError("no job of the log started")
    first, last = min(job.start for job in ended), max(job.end for job in ended)  # type: ignore[type-var]
    wall = last - first
    counts = {kind: sum(job.ended == kind for job in ended) for kind in ("finished", "failed", "unfinished")}
    report: dict = {"wall_s": wall, "jobs": len(ended), **{f"jobs_{kind}": n for kind, n in counts.items()},
                    "resources": {}}
    for name, bound in sorted(bounds.items()):
        if bound <= 0:
            continue
        held = [(job.start, job.end, job.resources.get(name, 0.0), job.rule) for job in ended]
        amount_s = sum((end - start) * amount for start, end, amount, _ in held)
        report["resources"][name] = {
            "bound": bound,
            "mean_share": amount_s / wall / bound if wall > 0 else None,
            "seconds_at_least_90_percent": _seconds_at_least(held, FULL_SHARE * bound, first, last),
            "wall_needed_s": amount_s / bound,
            "by_rule": _by_rule(held),
        }
    return report


def _seconds_at_least(held: list[tuple], level: float, first: float, last: float) -> float:
    """Seconds (to the log's one-second resolution) during which the running jobs' amounts add up to ``level``."""
    edges = sorted({first, last, *(start for start, *_ in held), *(end for _, end, *_ in held)})
    seconds = 0.0
    for left, right in zip(edges, edges[1:]):
        if sum(amount for start, end, amount, _ in held if start <= left and end >= right) >= level:
            seconds += right - left
    return seconds


def _by_rule(held: list[tuple]) -> dict[str, dict[str, float]]:
    rules: dict[str, dict[str, float]] = {}
    for start, end, amount, rule in held:
        entry = rules.setdefault(rule, {"jobs": 0, "job_seconds": 0.0, "amount_seconds": 0.0})
        entry["jobs"] += 1
        entry["job_seconds"] += end - start
        entry["amount_seconds"] += (end - start) * amount
    return {rule: entry for rule, entry in sorted(rules.items()) if entry["amount_seconds"] > 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, required=True, help="Snakemake's log of the run")
    parser.add_argument("--out", type=Path, default=None, help="a JSON file (also printed)")
    args = parser.parse_args()
    bounds, jobs = parse_log(args.log.read_text(encoding="utf-8"))
    if not set(bounds) - {"_cores"}:
        raise SystemExit(f"{args.log}: no 'Provided resources:' line (not a Snakemake log of a local run?)")
    text = json.dumps({"log": str(args.log), **usage(bounds, jobs)}, indent=1) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
