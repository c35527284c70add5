"""`python -m workflow_scripts explain`: where a number of the results comes from, every link of its chain checked.

    explain MODEL LEVEL PROBLEM               one row: the summary counts it is part of, the row, the problem, the
                                              completion, the extracted answer, its static analysis, the evaluation
                                              and baseline (store keys, object hashes), the logs, the code version
                                              and the environment
    explain --summary MODEL METRIC [LEVEL]    one number of summary.json (a count such as correct or
                                              eager_fast_1, a rate such as correct_rate, mean_completion_tokens):
                                              the rows that make it up, and the number recomputed from them
    explain --columns FILE.parquet            what each column of a parquet file of the pipeline means, and its unit

The results folder and the store come from the configuration (``--configfile``, as for Snakemake: config.yaml by
default; repeated, the files are merged in order), or from ``--results`` / ``--store`` (then without the suite and
the models' settings, unless a configuration is given too). Run it in the workflow's folder.
It only reads. Exit status: 0 when every check passes, 1 when one fails (a hash that no longer matches, a number
that disagrees with its rows), 2 when what was asked for does not exist.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.core import configuration
from workflow_scripts.core.columns import table as column_table
from workflow_scripts.core.hashing import sha256_file, sha256_text
from workflow_scripts.core.layout import ResultsLayout, problem_key
from workflow_scripts.core.statuses import DESCRIPTIONS, Status
from workflow_scripts.core.store import Store, code_version, package_version
from workflow_scripts.evaluation.environment import fingerprint_key
from workflow_scripts.generation.cache import CompletionCache
from workflow_scripts.generation.kinds import KINDS, CompletionSource
from workflow_scripts.scoring.summary import (
    BOOTSTRAP_METRICS, STRATEGY_FIELDS, bootstrap_fields, bootstrap_reference, count_members, level_fields, table_name,
)

PROG = "python -m workflow_scripts explain"
DEFAULT_CONFIG = Path("config.yaml")
RATES = {"compiled_rate": "compiled", "correct_rate": "correct"}
ENVIRONMENT_FACTS = ("device", "python", "torch", "triton", "cuda", "driver", "gpu_name", "cpu_model", "tf32_mode")
LOG_TAIL_LINES = 5


class ExplainError(Exception):
    """What was asked for does not exist (exit status 2); the message names the file or key."""


@dataclass
class Check:
    what: str
    ok: bool | None  # None: could not be checked (the file it needs was never built)
    detail: str = ""


@dataclass
class Section:
    title: str
    path: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    text: str | None = None  # the completion or the code, printed whole unless --brief

    def check(self, what: str, ok: bool | None, detail: str = "") -> None:
        self.checks.append(Check(what, ok, detail))


# ---------------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Workflow:
    """Where one configuration's results are (its results_dir and store) and its models' settings."""

    layout: ResultsLayout
    store: Store
    config: dict[str, Any]

    def model(self, name: str) -> dict[str, Any]:
        return (self.config.get("models") or {}).get(name) or {}


def load_workflow(configfiles: list[Path] | None, results: Path | None, store: Path | None) -> Workflow:
    # --results alone: no configuration (config.yaml may be another run's); the suite and model checks then say so.
    files = configfiles or ([] if results is not None else [DEFAULT_CONFIG])
    try:
        config = configuration.load(files)
    except configuration.ConfigError as error:
        raise ExplainError(f"{error} (run in the workflow's folder, or give --results and --store)") from None
    if results is None and not config:
        raise ExplainError("no results folder: no configuration; give --results")
    root = results or Path(configuration.results_dir(config))
    if store is None and not config:
        raise ExplainError("no store: no configuration; give --store")
    store_root = store or Path(configuration.store_dir(config))
    return Workflow(ResultsLayout(str(root)), Store(store_root), config)


def plain(value: Any) -> Any:
    """A parquet or JSON value as plain Python: NA -> None, numpy scalars -> int/float/bool."""
    if value is None or (not isinstance(value, (str, bytes, list, dict)) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def read_parquet(path: str, what: str) -> pd.DataFrame:
    if not Path(path).is_file():
        raise ExplainError(f"{path} does not exist: build the {what} first (snakemake --cores all {path})")
    return pd.read_parquet(path)


def one_row(frame: pd.DataFrame, path: str, level: int, problem_id: int, model: str | None = None) -> dict | None:
    match = (frame["level"] == level) & (frame["problem_id"] == problem_id)
    if model is not None:
        match &= frame["model"] == model
    found = frame[match]
    if len(found) > 1:
        raise ExplainError(f"{path} has {len(found)} rows for {model or ''} level {level} problem {problem_id}")
    return {k: plain(v) for k, v in found.iloc[0].to_dict().items()} if len(found) else None


def read_json(path: str) -> dict[str, Any] | None:
    return json.loads(Path(path).read_text(encoding="utf-8")) if Path(path).is_file() else None


def with_unit(table: str, column: str, value: Any) -> str:
    definition = column_table(table).column(column)
    unit = definition.unit if definition else ""
    shown = "null" if value is None else str(value)
    return f"{shown} {unit}" if value is not None and unit in ("ms", "tokens", "ratio") else shown


# ---------------------------------------------------------------------------------------------------- one row


def resolve_problem(rows: pd.DataFrame, path: str, level: int, problem: str) -> int:
    """The problem id from an id or a problem name."""
    if problem.isdigit():
        return int(problem)
    named = rows[(rows["level"] == level) & (rows["problem"].astype(str) == problem)]
    if named.empty:
        raise ExplainError(f"{path} has no level-{level} problem named {problem!r}")
    return int(named["problem_id"].iloc[0])


def summary_section(workflow: Workflow, rows: pd.DataFrame, row: dict[str, Any]) -> Section:
    model, level, pid = row["model"], int(row["level"]), int(row["problem_id"])
    path = workflow.layout.summary_json()
    section = Section("summary: the published numbers this row is part of", path)
    members = count_members(rows, model)
    here = members[(members["level"] == level) & (members["problem_id"] == pid)].iloc[0]
    summary = read_json(path)
    levels = (summary or {}).get("models", {}).get(model, {}).get("levels", {})
    counted, not_counted = [], []
    disagree = []
    for name in level_fields():
        values = {}
        for key, mask in ((str(level), members["level"] == level), ("overall", members["level"].notna())):
            recomputed = int(members.loc[mask, name].sum())
            published = levels.get(key, {}).get(name)
            values[key] = published
            if published is not None and published != recomputed:
                disagree.append(f"levels.{key}.{name}: summary.json {published}, rows {recomputed}")
        label = f"{table_name(name)} (level {level}: {values[str(level)]}, overall: {values['overall']})"
        (counted if here[name] else not_counted).append(label)
    section.facts["counted in"] = counted
    section.facts["not counted in"] = not_counted
    strategy = (summary or {}).get("level2_strategy", {}).get(model, {}).get(str(level), {})
    section.facts["level2_strategy counted in"] = [f"{name} (level {level}: {strategy.get(name)})"
                                                   for name in STRATEGY_FIELDS if here[name]]
    for name in STRATEGY_FIELDS:
        recomputed = int(members.loc[members["level"] == level, name].sum())
        if strategy.get(name) is not None and strategy[name] != recomputed:
            disagree.append(f"level2_strategy.{level}.{name}: summary.json {strategy[name]}, rows {recomputed}")
    mean = (summary or {}).get("models", {}).get(model, {}).get("mean_completion_tokens")
    tokens = row.get("completion_tokens")
    section.facts["mean_completion_tokens"] = (
        f"{tokens} tokens of this row are in the mean {mean}" if tokens is not None
        else f"this row has no token count; not in the mean {mean}")
    if summary is not None:
        reference = bootstrap_reference(summary)
        block = summary[f"paired_bootstrap_vs_{reference}"]
        if model == reference:
            section.facts[f"paired_bootstrap_vs_{reference}"] = "this model is the reference"
        elif model in block:
            theirs = count_members(rows, reference)
            ref_here = theirs[(theirs["level"] == level) & (theirs["problem_id"] == pid)].iloc[0]
            outcome = {}
            counts = bootstrap_fields()  # the per-problem success each metric compares, as count columns
            for metric in BOOTSTRAP_METRICS:
                own, ref = bool(here[counts[metric]]), bool(ref_here[counts[metric]])
                word = "gained" if own and not ref else "lost" if ref and not own else "same as the reference"
                outcome[metric] = f"{word} (summary: gained {block[model][metric]['gained']}, lost " \
                                  f"{block[model][metric]['lost']})"
            section.facts[f"paired_bootstrap_vs_{reference}"] = outcome
        section.check("summary.json's counts for this model agree with its rows", not disagree, "; ".join(disagree))
    else:
        section.check("summary.json exists", None, f"{path} not built")
    return section


def row_section(workflow: Workflow, row: dict[str, Any]) -> Section:
    section = Section("row", workflow.layout.rows())
    section.facts = {name: with_unit("rows", name, value) for name, value in row.items()}
    if row.get("status") in {status.value for status in Status}:
        section.facts["what the status means"] = DESCRIPTIONS[Status(row["status"])]
    own = workflow.layout.model_rows(row["model"])
    if Path(own).is_file():
        same = one_row(pd.read_parquet(own), own, row["level"], row["problem_id"], row["model"])
        differs = sorted(k for k in row if k != "code_version" and same is not None and same.get(k) != row[k]
                         and not (_nan(same.get(k)) and _nan(row[k])))
        section.check(f"the per-model rows ({own}) hold the same row", same is not None and not differs,
                      f"columns differ: {differs}" if differs else "")
    return section


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def problem_section(workflow: Workflow, row: dict[str, Any]) -> Section:
    path = workflow.layout.problems()
    section = Section("problem", path)
    problem = one_row(read_parquet(path, "problem index"), path, row["level"], row["problem_id"])
    if problem is None:
        section.check("the problem index has the problem", False)
        return section
    section.facts = dict(problem)
    suite = (workflow.config.get("suite") or {}).get("path")
    section.check("the row's problem_sha256 is the indexed file's", problem["sha256"] == row["problem_sha256"])
    if suite and Path(suite, problem["path"]).is_file():
        source = Path(suite, problem["path"])
        section.facts["file"] = str(source)
        section.check("the problem file still has that sha256", sha256_file(source) == problem["sha256"])
    else:
        section.check("the problem file still has that sha256", None, f"no suite file under {suite!r}")
    return section


def completion_section(workflow: Workflow, row: dict[str, Any], answer: dict[str, Any] | None) -> Section:
    model, level, pid = row["model"], row["level"], row["problem_id"]
    path = workflow.layout.completions(model)
    section = Section("completion: the raw text the model returned", path)
    if not Path(path).is_file():
        section.check("the completions file exists", False, f"{path} not built")
        return section
    records = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    record = next((r for r in records if r["level"] == level and r["problem_id"] == pid), None)
    if record is None:
        section.check("the completions file has the problem", False)
        return section
    section.facts = {k: record.get(k) for k in ("status", "completion_tokens", "prompt_sha256", "cache_key",
                                                "error", "provenance")}
    section.text = record.get("text")
    text_hash = None if record.get("text") is None else sha256_text(record["text"])
    section.check("the text's sha256 is the answer's completion_sha256",
                  text_hash == (answer or {}).get("completion_sha256") == row["completion_sha256"])
    entry = workflow.model(model)
    kind = KINDS.get(entry.get("kind"))
    section.facts["model kind"] = entry.get("kind")
    source = kind.source if kind else None
    if source is CompletionSource.FOLDER and entry.get("completions"):
        source = Path(entry["completions"], f"{problem_key(level, pid)}.txt")
        section.facts["source file"] = str(source)
        if source.is_file():
            section.check("the cached file's sha256 is the record's cache_key",
                          sha256_file(source) == record["cache_key"])
        else:
            section.check("the cached file exists", record["status"] == "missing", f"{source} is absent")
    elif source is CompletionSource.PROBLEM:
        section.facts["source"] = "the problem's own code, class renamed ModelNew (cache_key = its sha256)"
        section.check("the cache_key is the problem's sha256", record["cache_key"] == row["problem_sha256"])
    elif source is CompletionSource.CACHE:
        root = Path(entry.get("cache") or Path(workflow.store.root, "completions"))
        section.facts["completion cache"] = f"{root} (key {record['cache_key']})"
        if root.is_dir() and record.get("cache_key"):
            cached = CompletionCache(root).get(record["cache_key"])
            section.check("the completion cache holds this text under the cache_key",
                          cached is not None and cached.text == record.get("text"))
        else:
            section.check("the completion cache holds this text under the cache_key", None, f"no cache at {root}")
    return section


def answer_section(workflow: Workflow, row: dict[str, Any]) -> tuple[Section, dict[str, Any] | None]:
    path = workflow.layout.answers(row["model"])
    section = Section("answer: the code extracted from the completion", path)
    answer = one_row(read_parquet(path, "answers"), path, row["level"], row["problem_id"])
    if answer is None:
        section.check("the answers table has the problem", False)
        return section, None
    section.text = answer.pop("code")
    section.facts = answer
    section.check("the code's sha256 is the answer's and the row's code_sha256",
                  (None if section.text is None else sha256_text(section.text)) == answer["code_sha256"]
                  == row["code_sha256"])
    return section, answer


def static_section(workflow: Workflow, row: dict[str, Any]) -> Section:
    path = workflow.layout.static(row["model"])
    section = Section("static analysis", path)
    static = one_row(read_parquet(path, "static analysis"), path, row["level"], row["problem_id"])
    if static is None:
        section.check("the static table has the problem", False)
        return section
    section.facts = {k: v for k, v in static.items() if k not in ("model", "level", "problem_id")}
    section.check("the row's keeps_torch_op is the static analysis'", static["keeps_torch_op"] == row["keeps_torch_op"])
    return section


def stage_module(stage: str) -> str | None:
    """The module whose code version keys a store stage's objects: the stage module declaring ``STAGE = stage``
    (the names differ: the baseline rule's objects are stage "baselines")."""
    import ast

    # Read, not imported: tools import no other entry point.
    for path in sorted((Path(__file__).resolve().parents[1] / "stages").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "STAGE" for t in node.targets)
                    and isinstance(node.value, ast.Constant) and node.value.value == stage):
                return f"workflow_scripts.stages.{path.stem}"
    return None


def store_checks(workflow: Workflow, section: Section, readable: str, output: str = "json"
                 ) -> tuple[str | None, dict[str, Any] | None]:
    """The store's side of a readable file: its manifest entry, whether the file and the object behind it still
    hash to what was recorded, and whether the code now checked out would reuse the object. Returns the manifest's
    key and the object's meta (None where absent)."""
    store = workflow.store
    entry_path = store.manifest_path(Path(readable))
    entry = store.manifest_entry(readable)
    if entry is None:
        section.check("the store's manifest lists the file", False, f"no {entry_path}")
        return None, None
    section.facts["store key"] = entry["key"]
    section.facts["store object"] = str(store.object_path(entry["key"]))
    section.facts["manifest entry"] = str(entry_path)
    section.check("the file's sha256 is the manifest's", sha256_file(readable) == entry["sha256"])
    meta = store.read_meta(entry["key"])
    obj = store.object_path(entry["key"])
    if meta is None or not obj.is_file():
        section.check("the stored object's bytes still hash to its recorded sha256", False, f"no object {obj}")
        return entry["key"], None
    intact = sha256_file(obj) == meta.sha256
    section.check("the stored object's bytes still hash to its recorded sha256", intact)
    if not intact:
        return entry["key"], asdict(meta)  # never reused, whatever the code: the store recomputes it
    module = stage_module(meta.stage)
    if module is None:
        section.check(f"no stage module declares the stage {meta.stage!r}", False)
        return entry["key"], asdict(meta)
    current = code_version(module)
    reused = store.holds(meta.stage, current, meta.params, meta.inputs, names=(output,))
    section.check(f"the {meta.stage} code checked out now would reuse it (code version {current[:12]})", reused,
                  "" if reused else "the stage's code (or a module it imports) changed since: a rerun recomputes it")
    return entry["key"], asdict(meta)


Evaluated = tuple[dict[str, Any], dict[str, Any] | None]  # the evaluation JSON and its store meta


def evaluation_section(workflow: Workflow, row: dict[str, Any]) -> tuple[Section, Evaluated | None]:
    path = workflow.layout.evaluation(row["model"], row["level"], row["problem_id"])
    section = Section("evaluation", path)
    evaluation = read_json(path)
    if evaluation is None:
        section.check("the evaluation file exists", False, f"{path} not built")
        return section, None
    section.facts = {k: evaluation.get(k) for k in ("status", "compiled", "correct", "runtime_ms", "max_abs_diff",
                                                    "triton_launches", "flags", "error", "device", "timing_mode")}
    section.check("the row's status is the evaluation's", evaluation["status"] == row["status"])
    key, meta = store_checks(workflow, section, path)
    if key is not None:
        section.check("the row's evaluation_key is the manifest's key", row.get("evaluation_key") == key)
    if meta is not None:
        section.facts["run settings (store key params)"] = meta["params"]
    return section, (evaluation, meta)


def baseline_section(workflow: Workflow, row: dict[str, Any]) -> Section:
    path = workflow.layout.baseline(row["level"], row["problem_id"])
    section = Section("baseline: eager PyTorch and torch.compile", path)
    baseline = read_json(path)
    if baseline is None:
        section.check("the baseline file exists", False, f"{path} not built")
        return section
    section.facts = {k: baseline.get(k) for k in ("eager_ms", "eager_status", "compile_ms", "compile_status",
                                                  "compile_backend", "device", "timing_mode")}
    if baseline.get("compile_status") == "ok":
        section.check("the row's compile_ms is the baseline's", baseline.get("compile_ms") == row["compile_ms"]
                      or row["runtime_ms"] is None)
    store_checks(workflow, section, path)
    return section


def logs_section(workflow: Workflow, row: dict[str, Any], brief: bool) -> Section:
    model, level, pid = row["model"], row["level"], row["problem_id"]
    key = problem_key(level, pid)
    section = Section("logs")
    logs = {
        "completions": workflow.layout.log(f"completions/{model}"),
        "extract": workflow.layout.log(f"extract/{model}"),
        "static_analysis": workflow.layout.log(f"static/{model}"),
        "evaluate": workflow.layout.log(f"evaluations/{model}/{key}"),
        "baseline": workflow.layout.log(f"baselines/{key}"),
        "collect": workflow.layout.log("collect"),
        "summary": workflow.layout.log("summary"),
    }
    for rule, log in logs.items():
        section.facts[rule] = log if Path(log).is_file() else f"{log} (absent)"
    evaluate_log = Path(logs["evaluate"])
    if not brief and evaluate_log.is_file():
        tail = evaluate_log.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
        section.text = "\n".join(tail)
    return section


def code_section(row: dict[str, Any]) -> Section:
    section = Section("code version")
    now = package_version()
    section.facts["the row was built by"] = row.get("code_version")
    section.facts["this checkout is"] = now
    section.facts["stage code versions now"] = {stage: code_version(f"workflow_scripts.stages.{stage}")[:12]
                                                for stage in ("extract", "static_analysis", "evaluate", "baseline",
                                                              "collect", "summary")}
    return section


def environment_section(workflow: Workflow, row: dict[str, Any], evaluated: Evaluated | None) -> Section:
    device = row.get("device") or (workflow.config.get("evaluation") or {}).get("device", "cpu")
    path = workflow.layout.environment(device)
    section = Section("environment", path)
    recorded = read_json(path)
    if recorded is None:
        section.check("the environment fingerprint exists", False, f"{path} not built")
        return section
    section.facts = {k: recorded.get(k) for k in ENVIRONMENT_FACTS if k in recorded}
    section.facts["fingerprint key"] = fingerprint_key(recorded)
    if evaluated is not None:
        evaluation, meta = evaluated
        if meta is not None and "environment" in meta["inputs"]:
            section.check("the evaluation is stored under this environment's key",
                          meta["inputs"]["environment"] == fingerprint_key(recorded))
        measured = evaluation.get("fingerprint")
        if measured:
            section.check("the evaluation was measured in this environment",
                          fingerprint_key(measured) == fingerprint_key(recorded))
    return section


def explain_row(workflow: Workflow, model: str, level: int, problem: str, brief: bool) -> list[Section]:
    path = workflow.layout.rows()
    rows = read_parquet(path, "per-problem rows")
    if model not in set(rows["model"]):
        raise ExplainError(f"{path} has no model {model!r} (models: {list(dict.fromkeys(rows['model']))})")
    pid = resolve_problem(rows, path, level, problem)
    row = one_row(rows, path, level, pid, model)
    if row is None:
        raise ExplainError(f"{path} has no row for {model} level {level} problem {pid}")
    answer_part, answer = answer_section(workflow, row)
    evaluation_part, evaluated = evaluation_section(workflow, row)
    sections = [
        summary_section(workflow, rows, row), row_section(workflow, row), problem_section(workflow, row),
        completion_section(workflow, row, answer), answer_part, static_section(workflow, row), evaluation_part,
        baseline_section(workflow, row), logs_section(workflow, row, brief), code_section(row),
        environment_section(workflow, row, evaluated),
    ]
    if brief:
        for section in sections:
            if section.title.startswith(("completion", "answer")):
                section.text = None
    return sections


# ---------------------------------------------------------------------------------------------------- one number


def explain_number(workflow: Workflow, model: str, metric: str, level: str) -> list[Section]:
    """The rows behind one number of summary.json, and that number recomputed from them."""
    rows_path = workflow.layout.rows()
    rows = read_parquet(rows_path, "per-problem rows")
    if model not in set(rows["model"]):
        raise ExplainError(f"{rows_path} has no model {model!r} (models: {list(dict.fromkeys(rows['model']))})")
    published_names = {table_name(f): f for f in level_fields()}  # levels.parquet's names too
    count = published_names.get(metric, metric)
    known = set(level_fields()) | set(STRATEGY_FIELDS) | set(RATES) | {"mean_completion_tokens"}
    if count not in known:
        raise ExplainError(f"unknown metric {metric!r}; one of {sorted(known | set(published_names))}")
    members = count_members(rows, model)
    if level == "overall":
        chosen = members
    elif level.isdigit() and int(level) in set(members["level"]):
        chosen = members[members["level"] == int(level)]
    else:
        raise ExplainError(f"{rows_path} has no level {level!r} (levels: {sorted(set(members['level']))}, overall)")
    summary_path = workflow.layout.summary_json()
    summary = read_json(summary_path)
    entry = (summary or {}).get("models", {}).get(model, {})
    column = RATES.get(count, count)
    if count == "mean_completion_tokens":
        behind = chosen[chosen["mean_completion_tokens"]]
        tokens = behind["completion_tokens"].tolist()
        recomputed = math.fsum(tokens) / len(tokens) if tokens else None
        published = entry.get("mean_completion_tokens")
        where = f"{summary_path}: models.{model}.mean_completion_tokens"
        if level != "overall":  # the JSON has the mean of all levels only; levels.parquet has each level's
            published, where = _levels_table_value(workflow, model, level, count)
    elif count in STRATEGY_FIELDS:
        behind = chosen[chosen[count]]
        recomputed = len(behind)
        strategy = (summary or {}).get("level2_strategy", {}).get(model, {})
        if level == "overall":
            parts = [v.get(count) for v in strategy.values()]
            published = sum(parts) if parts and None not in parts else None
            where = f"{summary_path}: level2_strategy.{model}.* (summed over the levels)"
        else:
            published = strategy.get(level, {}).get(count)
            where = f"{summary_path}: level2_strategy.{model}.{level}.{count}"
    else:
        behind = chosen[chosen[column]]
        recomputed = len(behind) if count == column else (len(behind) / len(chosen) if len(chosen) else None)
        if count == column:
            published = entry.get("levels", {}).get(level, {}).get(count)
            where = f"{summary_path}: models.{model}.levels.{level}.{count}"
        else:
            published, where = _levels_table_value(workflow, model, level, count)
    section = Section(f"{metric} of {model} at level {level}")
    section.facts["published"] = f"{published} ({where})"
    section.facts["recomputed from the rows"] = recomputed
    if count in RATES:
        section.facts["definition"] = f"{column} / n = {len(behind)} / {len(chosen)}"
    section.facts["rows"] = [
        {"level": int(r.level), "problem_id": int(r.problem_id), "problem": r.problem,
         **({"completion_tokens": plain(r.completion_tokens)} if count == "mean_completion_tokens" else {}),
         "explain": f"{PROG} {model} {int(r.level)} {int(r.problem_id)}"}
        for r in behind.itertuples()
    ]
    if published is None:
        section.check("the published number exists", None, f"{where} not found (summary not built?)")
    else:
        agree = published == recomputed or (isinstance(published, float) and recomputed is not None
                                            and math.isclose(published, recomputed, rel_tol=1e-12))
        section.check("the published number equals the one recomputed from the rows", agree,
                      "" if agree else f"published {published}, rows give {recomputed}: the summary is stale")
    return [section]


def _levels_table_value(workflow: Workflow, model: str, level: str, column: str) -> tuple[Any, str]:
    path = workflow.layout.table("levels")
    if not Path(path).is_file():
        return None, path
    table = pd.read_parquet(path)
    match = table[(table["model"] == model) & (table["level"] == level)]
    return (plain(match[column].iloc[0]) if len(match) else None), f"{path}: {model} level {level} {column}"


# ---------------------------------------------------------------------------------------------------- columns


def explain_columns(path: Path) -> list[Section]:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise ExplainError(f"{path} does not exist")
    schema = pq.read_schema(path)
    metadata = schema.metadata or {}
    table = metadata.get(b"table", b"").decode()
    section = Section(f"columns of the table {table}" if table else "columns", str(path))
    if b"description" in metadata:
        section.facts["table"] = metadata[b"description"].decode()
    for name in schema.names:
        meta = schema.field(name).metadata or {}
        description = meta.get(b"description", b"(no description)").decode()
        unit = meta.get(b"unit", b"").decode()
        section.facts[name] = f"{description} [{unit}]" if unit and unit != "none" else description
    section.check("every column is described", all(b"description" in (schema.field(n).metadata or {})
                                                   for n in schema.names))
    return [section]


# ---------------------------------------------------------------------------------------------------- output


def render(sections: list[Section]) -> str:
    marks = {True: "ok  ", False: "FAIL", None: "--  "}
    lines: list[str] = []
    for number, section in enumerate(sections, start=1):
        lines.append(f"[{number}] {section.title}" + (f"    {section.path}" if section.path else ""))
        for key, value in section.facts.items():
            lines.extend(_fact_lines(key, value))
        if section.text is not None:
            lines.append("    ---")
            lines.extend(f"    | {line}" for line in section.text.splitlines())
            lines.append("    ---")
        for check in section.checks:
            lines.append(f"    [{marks[check.ok]}] {check.what}" + (f": {check.detail}" if check.detail else ""))
        lines.append("")
    return "\n".join(lines)


def _fact_lines(key: str, value: Any) -> list[str]:
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [f"    {key}: {len(value)}"] + [
            "      " + ", ".join(f"{k}={v}" for k, v in item.items() if k != "explain") + f"    ({item['explain']})"
            if "explain" in item else "      " + json.dumps(item) for item in value]
    if isinstance(value, list):
        return [f"    {key}:"] + [f"      {item}" for item in value] if value else [f"    {key}: (none)"]
    if isinstance(value, dict):
        return [f"    {key}:"] + [f"      {k}: {v}" for k, v in value.items()]
    return [f"    {key}: {value}"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:11]))
    parser.add_argument("what", nargs="*", metavar="ARG",
                        help="MODEL LEVEL PROBLEM (PROBLEM: its id or name), or with --summary MODEL METRIC [LEVEL]")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--summary", action="store_true", help="explain a number of summary.json")
    mode.add_argument("--columns", type=Path, metavar="FILE", help="describe the columns of a parquet file")
    parser.add_argument("--configfile", type=Path, action="append",
                        help="the run's configuration (default: config.yaml); repeat it to merge an overlay")
    parser.add_argument("--results", type=Path, help="the results folder (default: the configuration's results_dir)")
    parser.add_argument("--store", type=Path, help="the store (default: the configuration's store)")
    parser.add_argument("--json", action="store_true", help="print the chain as JSON")
    parser.add_argument("--brief", action="store_true", help="leave out the completion and code texts")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.columns is not None and args.what:
        parser.error("--columns takes no other arguments")
    if args.summary and len(args.what) not in (2, 3):
        parser.error("--summary takes MODEL METRIC [LEVEL]")
    if args.columns is None and not args.summary and (len(args.what) != 3 or not args.what[1].isdigit()):
        parser.error("give MODEL LEVEL PROBLEM (e.g. expert 1 3), or --summary MODEL METRIC [LEVEL]")
    try:
        if args.columns is not None:
            sections = explain_columns(args.columns)
        else:
            workflow = load_workflow(args.configfile, args.results, args.store)
            if args.summary:
                sections = explain_number(workflow, args.what[0], args.what[1],
                                          args.what[2] if len(args.what) == 3 else "overall")
            else:
                sections = explain_row(workflow, args.what[0], int(args.what[1]), args.what[2], args.brief)
    except ExplainError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    ok = all(check.ok is not False for section in sections for check in section.checks)
    if args.json:
        sys.stdout.write(json.dumps({"ok": ok, "sections": [asdict(s) for s in sections]}, indent=1, default=str)
                         + "\n")
    else:
        sys.stdout.write(render(sections))
        sys.stdout.write("all checks pass\n" if ok else "some checks FAIL\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
