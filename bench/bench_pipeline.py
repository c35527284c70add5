"""Times the pipeline: the demo run from empty results, and the dry run of a study-sized DAG.

    python bench/bench_pipeline.py [--skip-demo] [--schedulers greedy ilp]

1. demo: copies the workflow to a temporary folder and runs `snakemake --cores all` on the bundled demo,
   from an empty results folder and empty store (the install is timed separately: see bench/README.md).
2. study dry run: a synthetic suite of 100 + 100 problems (KernelBench's layout and file names) and 15 models,
   `snakemake -n` with each scheduler; prints the job count and the wall time.
Record the printed numbers in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from workflow_scripts.devtools.workspace import copy_workflow  # noqa: E402

STUDY_MODELS = [
    "base", "rl_old300", "rl_old500", "rl_v6_250", "rl_v7_235", "sft", "sft_rl241", "sft_rl100", "sft_rl150",
    "sft_rl200", "sft_rl300", "opus55", "gpt61sol", "fable51", "gpt6astra",
]



def snakemake(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - start, done


def bench_demo() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        work = Path(tmp)
        copy_workflow(work)
        seconds, done = snakemake(["--cores", "all"], work)
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-3000:])
            raise SystemExit("demo run failed")
        jobs = re.findall(r"(\d+) of (\d+) steps \(100%\) done", done.stderr)
        print(f"demo: {seconds:.1f} s wall, {jobs[-1][1] if jobs else '?'} jobs")
        store = Path(yaml.safe_load((work / "config.yaml").read_text())["store"])  # the demo's own store
        events = [json.loads(line)["event"] for line in (work / store / "events.jsonl").read_text().splitlines()]
        print(f"demo: {events.count('computed')} stage runs computed, {events.count('reused')} reused from the store")


def synthetic_study(work: Path) -> None:
    """200 problem files named like KernelBench's, and 15 models with (empty) cached completion folders."""
    suite = work / "suite"
    names = {1: [], 2: []}
    shared = ROOT.parent / "shared" / "kernelbench" / "KernelBench"
    for level in (1, 2):
        level_dir = suite / "KernelBench" / f"level{level}"
        level_dir.mkdir(parents=True)
        files = sorted((shared / f"level{level}").glob("*.py")) if shared.is_dir() else []
        names[level] = [f.name for f in files] or [f"{i}_Problem{i}.py" for i in range(1, 101)]
        for name in names[level]:
            (level_dir / name).write_text("import torch\n")
    prompts = suite / "src" / "kernelbench" / "prompts"
    shutil.copytree(ROOT / "demo" / "suite" / "src" / "kernelbench" / "prompts", prompts)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["suite"]["path"] = str(suite)
    config["evaluation"]["device"] = "cuda"
    config["summary"]["reference"] = "sft"
    config["models"] = {}
    for model in STUDY_MODELS:
        (work / "completions" / model).mkdir(parents=True)
        config["models"][model] = {"kind": "cached", "completions": str(work / "completions" / model)}
    (work / "study.yaml").write_text(yaml.safe_dump(config))


def bench_dry_run(schedulers: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-dag-") as tmp:
        work = Path(tmp)
        copy_workflow(work)
        synthetic_study(work)
        for scheduler in schedulers:
            seconds, done = snakemake(
                ["-n", "--quiet", "rules", "--configfile", "study.yaml", "--scheduler", scheduler, "--resources", "gpu=8"],
                work,
            )
            if done.returncode != 0:
                print(done.stdout[-3000:], done.stderr[-3000:])
                raise SystemExit("dry run failed")
            total = re.search(r"^total\s+(\d+)", done.stdout, re.MULTILINE)
            print(f"study dry run ({scheduler}): {seconds:.1f} s wall, {total.group(1) if total else '?'} jobs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--schedulers", nargs="+", default=["greedy"])
    args = parser.parse_args()
    bench_dry_run(args.schedulers)
    if not args.skip_demo:
        bench_demo()


if __name__ == "__main__":
    main()
