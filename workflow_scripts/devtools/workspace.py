"""Copy the workflow (its code, rules, configuration and demo; no results) to another folder.

Tests and benchmarks run the Snakemake CLI on such copies so they never touch the checkout's results/; the same
copy is what to ship to a machine that runs the pipeline elsewhere.

    python -m workflow_scripts.devtools.workspace --dest DIR
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "workflow_scripts"
WORKFLOW_PARTS = ["Snakefile", "rules", "report", "schemas", "workflow_scripts", "profiles", "envs", "demo", "config.yaml", "config"]


def copy_workflow(dest: Path, root: Path = ROOT) -> Path:
    """The workflow's parts copied to ``dest``, with the package's bytecode where the checkout has it: the copies
    keep their sources' times, so Python takes it as it is instead of compiling each module in each process (where
    none may write it: PYTHONDONTWRITEBYTECODE, the evaluator's children); an edited source is compiled afresh."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in WORKFLOW_PARTS:
        source = root / part
        if source.is_dir():
            shutil.copytree(source, dest / part,
                            ignore=None if part == PACKAGE else shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / part)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.devtools.workspace", description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, required=True)
    args = parser.parse_args(argv)
    print(copy_workflow(args.dest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
