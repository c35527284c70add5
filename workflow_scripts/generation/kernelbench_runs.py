"""KernelBench's run folders, both ways: its generations brought in as cached completion folders (one per sample),
and our answers written out in its layout so that its own harness can judge them again.

A KernelBench run folder (``runs/<run>/``) holds one file per generated sample, bare code (no prose, no fence)::

    level_<L>_problem_<id>_sample_<s>_kernel.py

The pipeline's ``cached`` kind replays raw completions (``level<L>_<id>.txt``) and extracts the first fenced code
block from each, as KernelBench's own extraction does: a bare file would be ``no_code``. ``import_run`` therefore
writes each sample's file inside one ```python fence, into a folder of its own (``<name>_s<s>``: sample 0, 1, ...),
each a ``kind: cached`` model; ``summary.samples`` in the configuration names a run's sample models, and the summary
reports pass@k over them (scoring/samples.py). ``export_run`` writes an answers table (``<results>/answers/
<model>.parquet``) back as sample ``sample`` of a run folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

RUN_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


def run_file_name(level: int, problem_id: int, sample: int) -> str:
    return f"level_{level}_problem_{problem_id}_sample_{sample}_kernel.py"


def sample_folder_name(name: str, sample: int) -> str:
    """The cached model (and folder) that holds one sample of run ``name``."""
    return f"{name}_s{sample}"


@dataclass
class RunImport:
    """What ``import_run`` wrote: sample -> its folder and the (level, id) pairs it holds; files it did not read."""

    folders: dict[int, Path] = field(default_factory=dict)
    problems: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def import_run(run: Path | str, out_dir: Path | str, name: str) -> RunImport:
    """Every ``level_<L>_problem_<id>_sample_<s>_kernel.py`` of ``run`` as ``<out_dir>/<name>_s<s>/level<L>_<id>.txt``
    (the code inside one ```python fence, byte for byte otherwise). An existing sample folder is refused: an import
    never mixes two runs. Files of any other name are listed in ``skipped``."""
    run, out_dir = Path(run), Path(out_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"KernelBench run folder {run} does not exist")
    found: dict[int, dict[tuple[int, int], Path]] = {}
    report = RunImport()
    for path in sorted(run.iterdir()):
        match = RUN_FILE.match(path.name)
        if match is None or not path.is_file():
            report.skipped.append(path.name)
            continue
        level, problem_id, sample = (int(g) for g in match.groups())
        found.setdefault(sample, {})[(level, problem_id)] = path
    if not found:
        raise ValueError(f"{run} holds no KernelBench generation (level_<L>_problem_<id>_sample_<s>_kernel.py)")
    for sample in sorted(found):
        folder = out_dir / sample_folder_name(name, sample)
        if folder.exists():
            raise FileExistsError(f"{folder} exists already: import each run into folders of its own")
    for sample, files in sorted(found.items()):
        folder = out_dir / sample_folder_name(name, sample)
        folder.mkdir(parents=True)
        for (level, problem_id), path in sorted(files.items()):
            code = path.read_text(encoding="utf-8")
            (folder / f"level{level}_{problem_id}.txt").write_text(f"```python\n{code.rstrip()}\n```\n",
                                                                   encoding="utf-8")
        report.folders[sample] = folder
        report.problems[sample] = sorted(files)
    return report


def export_run(answers: Path | str, run: Path | str, sample: int = 0) -> list[Path]:
    """The answers table's extracted code (``answers/<model>.parquet``: rows with code) as sample ``sample`` of the
    KernelBench run folder ``run``; rows without code are left out, as KernelBench has no file for them."""
    import pyarrow.parquet as pq

    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    written = []
    for row in pq.read_table(answers, columns=["level", "problem_id", "code"]).to_pylist():
        if not row["code"]:
            continue
        path = run / run_file_name(int(row["level"]), int(row["problem_id"]), sample)
        path.write_text(row["code"], encoding="utf-8")
        written.append(path)
    return written
