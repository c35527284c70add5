"""Model kinds ``cached`` and ``reference``: one record per problem, replayed, never generated here.

Kinds handled here:
- ``cached``: raw completions (prose and code fences, exactly as the model or CLI returned them) read from a
  folder of ``level<L>_<id>.txt`` files; an optional ``meta.json`` gives token counts. A missing file is a
  record with status ``missing`` (the row fails later as ``missing_completion``), never a missing row.
- ``reference``: the calibration model. Its answer to every problem is the problem's own reference code with
  the class renamed to ``ModelNew``; timing it against eager measures the harness's noise and bias.

Kinds ``vllm`` and ``cli`` live in generation/vllm.py and generation/cli_tool.py and write the same JSONL.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from collections.abc import Collection
from pathlib import Path

import pandas as pd

from workflow_scripts.generation.cache import CompletionRecord
from workflow_scripts.core.layout import problem_key
from workflow_scripts.core.hashing import sha256_file

# A cached completion's file name: level<L>_<id>.txt (the raw text the model returned); meta.json holds token counts.
CACHED_FILE = re.compile(r"^level(\d+)_(\d+)\.txt$")
META_FILE = "meta.json"
# A KernelBench run folder's file name (runs/<run>/level_1_problem_1_sample_0_kernel.py): bare code, not a completion.
KERNELBENCH_RUN_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
UNFENCED_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)


def cached_folder_problems(folder: Path | str, chosen: Collection[tuple[int, int]] | None = None,
                           suite: Collection[tuple[int, int]] | None = None) -> list[str]:
    """What is wrong with a folder of cached completions, each naming the path (empty: nothing). Checked when the
    workflow is parsed, so a misnamed file stops the run instead of turning its problem into missing_completion.

    With the run's problems (``chosen``, (level, id) pairs) and every problem of the suite's configured levels
    (``suite``), also: a file for a configured level that names no problem of the suite (e.g. 0-based ids), and a
    folder that holds none of the chosen problems (the model would silently be all missing_completion)."""
    folder = Path(folder)
    if not folder.is_dir():
        return [f"completions folder {folder} does not exist"]
    problems = []
    found: set[tuple[int, int]] = set()
    suite_levels = {level for level, _ in suite or ()}
    for path in sorted(folder.iterdir()):
        if path.name.startswith("."):
            continue  # editor and OS litter
        if path.name == META_FILE:
            problems += meta_problems(path)
        elif KERNELBENCH_RUN_FILE.match(path.name):
            problems.append(f"{path} is named as in a KernelBench run folder: a cached completion is the model's raw "
                            "text in level<L>_<id>.txt, its code inside a ```python fence (KernelBench keeps bare "
                            "code; without the fence the answer would be no_code)")
        elif not (path.is_file() and (match := CACHED_FILE.match(path.name))):
            problems.append(f"{path} is not named level<L>_<id>.txt (nor {META_FILE})")
        else:
            level, problem_id = int(match.group(1)), int(match.group(2))
            found.add((level, problem_id))
            if suite is not None and level in suite_levels and (level, problem_id) not in suite:
                problems.append(f"{path} names no problem of the suite (level {level} has no problem {problem_id})")
    if chosen and not problems and not found & set(chosen):
        example = problem_key(*min(chosen))
        problems.append(f"completions folder {folder} holds no completion for any of the {len(chosen)} problems of "
                        f"this run (files level<L>_<id>.txt, e.g. {example}.txt): every row would be missing_completion")
    return problems


def meta_problems(path: Path) -> list[str]:
    """What is wrong with a folder's meta.json: a JSON object of {"level<L>_<id>": {"completion_tokens": N}}, N a
    whole number or null."""
    shape = "a JSON object of {'level<L>_<id>': {'completion_tokens': N}}"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return [f"{path} is not {shape}: {e}"]
    if not isinstance(meta, dict):
        return [f"{path} is not {shape}"]
    problems = []
    for key, value in meta.items():
        tokens = value.get("completion_tokens") if isinstance(value, dict) else None
        if not CACHED_FILE.match(f"{key}.txt"):
            problems.append(f"{path}: key {key!r} is not level<L>_<id>")
        elif not isinstance(value, dict) or not (tokens is None or (type(tokens) is int and tokens >= 0)):
            problems.append(f"{path}: {key}: {value!r} is not {{'completion_tokens': N}} with N a whole number or null")
    return problems


def unfenced_answers(folder: Path | str) -> list[str]:
    """Cached completions that define ModelNew outside any code fence, each named: they are judged no_code, as
    KernelBench's extraction judges them (a warning, not an error: a model that answered so scores that)."""
    found = []
    for path in sorted(Path(folder).glob("level*_*.txt")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # reported by its own row
        if "```" not in text and UNFENCED_MODEL_NEW.search(text):
            found.append(f"{path} defines ModelNew outside any ```python fence: its answer will be no_code")
    return found


def rename_reference_model(source: str) -> str:
    """Rename the name token ``Model`` to ``ModelNew`` (class and ``super(Model, self)``), nothing else."""
    tokens = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string == "Model":
            token = token._replace(string="ModelNew")
        tokens.append(token)
    return tokenize.untokenize(tokens)


def replay_cached(
    model: str, folder: Path, problems: pd.DataFrame, prompt_hashes: dict[str, str]
) -> list[CompletionRecord]:
    meta_file = folder / "meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    records = []
    for row in problems.itertuples():
        key = problem_key(row.level, row.problem_id)
        path = folder / f"{key}.txt"
        if not path.exists():
            records.append(
                CompletionRecord(
                    model, row.level, row.problem_id, "missing", None, None, prompt_hashes.get(key),
                    None, f"no cached completion {path.name} in {folder}", {"generation_provider": "cached"},
                )
            )
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            # This file costs its own row only: a failed completion whose message names it.
            records.append(
                CompletionRecord(
                    model, row.level, row.problem_id, "failed", None, None, prompt_hashes.get(key),
                    sha256_file(path), f"{path} is not UTF-8 text ({e})", {"generation_provider": "cached"},
                )
            )
            continue
        tokens = meta.get(key, {}).get("completion_tokens")
        records.append(
            CompletionRecord(
                model, row.level, row.problem_id, "ok" if text.strip() else "failed",
                text if text.strip() else None, tokens, prompt_hashes.get(key), sha256_file(path),
                None if text.strip() else "empty completion file", {"generation_provider": "cached"},
            )
        )
    return records


def reference_completions(model: str, suite_dir: Path, problems: pd.DataFrame) -> list[CompletionRecord]:
    records = []
    for row in problems.itertuples():
        source = (suite_dir / row.path).read_text(encoding="utf-8")
        text = "```python\n" + rename_reference_model(source).rstrip("\n") + "\n```\n"
        records.append(
            CompletionRecord(
                model, row.level, row.problem_id, "ok", text, None, None, row.sha256, None,
                {"generation_provider": "reference (calibration: the problem's own code renamed ModelNew)"},
            )
        )
    return records
