"""Generation stage for models reached through a command-line tool (``claude -p``, ``codex exec``, ...).

A model entry (:class:`CliModel`, the ``kind: cli`` entry of the config) names a command template. For each
prompt the stage runs the command (no shell; the template is split like a shell line, then placeholders are
filled in each argument), in a fresh empty working folder, and takes the answer from stdout (or from
``{answer_file}``). Answers go into the content-addressed :class:`CompletionCache` with their provenance;
the stage writes ``<results>/completions/<model>.jsonl`` (contract in ``completion_cache``).

Placeholders in ``command`` and in ``env`` values:

- ``{model}`` the tool's model name, ``{reasoning_effort}``, ``{output_token_cap}``: from the entry
  (an error if the template uses one the entry leaves empty);
- ``{prompt_file}``: a file holding the prompt; without it the prompt is written to the tool's stdin;
- ``{system_file}`` / ``{system}``: the system message (file / text); without either, a system message is
  put before the prompt, separated by a blank line;
- ``{answer_file}``: a file the tool writes its answer to (e.g. ``codex exec --output-last-message``);
  without it the answer is the tool's stdout;
- ``{workdir}``: the empty working folder the tool runs in.

Literal braces that are not one of these names are left alone (``-c '{"a": 1}'`` works).

With ``output_format: json`` (inferred when the command contains ``--output-format json``) stdout is parsed as
JSON (the last JSON object line when there are several): the answer is ``result`` (``json_text_field``), token
counts come from ``usage`` (``output_tokens``/``completion_tokens``), ``is_error: true`` is a failure.
Otherwise the raw stdout is the answer and ``completion_tokens`` is null.

Offline mode (the default, for reviewers) never runs the tool: a missing cached answer is an error that lists
every missing (model, level, problem) at once. A run that exits non-zero, times out or prints no answer is
retried (``attempts``, exponential ``backoff_s``); if every attempt fails, a failed generation is recorded,
never an empty answer, and it never replaces a good cached answer.

CLI::

    python -m workflow_scripts generate-cli generate --name NAME --entry-json '{...}' --prompts P.jsonl \\
        --out-dir <results>/completions --cache <store>/completions [--online] [--jobs N]
    python -m workflow_scripts generate-cli import --name NAME --entry-json '{...}' --prompts P.jsonl \\
        --cache <store>/completions --source DIR_OR_JSONL [--provenance '{...}']
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.generation.cache import (
    CompletionCache,
    CompletionRecord,
    MissingCompletionsError,
    PromptItem,
    cache_key,
    key_material,
    missing_record,
    utc_now,
)

PLACEHOLDERS = (
    "model",
    "reasoning_effort",
    "output_token_cap",
    "prompt_file",
    "system_file",
    "system",
    "answer_file",
    "workdir",
)
_PLACEHOLDER_RE = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
_ANSWER_NAME = re.compile(r"^level(\d+)_(\d+)\.(txt|md)$")


KIND = "cli"  # the model kind this module generates (generation/kinds.py)
# Model-entry keys that only the pipeline reads; every other key of a `kind: cli` entry is the tool's.
PIPELINE_ONLY_KEYS = frozenset({"kind", "label", "generation", "cache"})


@dataclass(frozen=True)
class CliModel:
    """A ``kind: cli`` model entry. See ``docs/generation.md`` for each key."""

    command: str
    provider: str = "cli"
    model: str | None = None
    reasoning_effort: str | None = None
    output_token_cap: int | None = None
    output_format: str | None = None  # "text" | "json"; None = infer from the command
    json_text_field: str = "result"
    env: Mapping[str, str] = field(default_factory=dict)
    decoding: Mapping[str, Any] = field(default_factory=dict)
    attempts: int = 3
    backoff_s: float = 30.0
    backoff_factor: float = 2.0
    timeout_s: float = 3600.0
    offline: bool = True
    tool_version: str | None = None
    parallel: int = 1  # tool calls at once (not part of the cache key: the answers do not depend on it)

    def __post_init__(self) -> None:
        if not self.command or not self.command.strip():
            raise ValueError("a cli model entry needs a command template")
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.parallel < 1:
            raise ValueError("parallel must be at least 1")
        fmt = self.resolved_output_format
        if fmt not in ("text", "json"):
            raise ValueError(f"output_format must be 'text' or 'json', not {fmt!r}")
        used = self.placeholders_used()
        for name in ("model", "reasoning_effort", "output_token_cap"):
            if name in used and getattr(self, name) in (None, ""):
                raise ValueError(f"the command template uses {{{name}}} but the entry gives no {name}")
        try:
            shlex.split(self.command)
        except ValueError as e:
            raise ValueError(f"cannot split the command template: {e}") from None

    @classmethod
    def from_model_entry(cls, entry: Mapping[str, Any]) -> CliModel:
        """From a ``models:`` entry of the workflow config (the keys only the pipeline reads are dropped)."""
        return cls.from_mapping({k: v for k, v in entry.items() if k not in PIPELINE_ONLY_KEYS})

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> CliModel:
        d = dict(d)
        kind = d.pop("kind", KIND)
        if kind != KIND:
            raise ValueError(f"not a cli model entry (kind {kind!r})")
        if "tool_model" in d and "model" not in d:
            d["model"] = d.pop("tool_model")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown keys in cli model entry: {unknown}")
        if d.get("output_token_cap") is not None:
            d["output_token_cap"] = int(d["output_token_cap"])
        return cls(**d)

    @property
    def resolved_output_format(self) -> str:
        if self.output_format:
            return self.output_format
        return "json" if re.search(r"--output-format[= ]json\b", self.command) else "text"

    def placeholders_used(self) -> set[str]:
        text = self.command + " " + " ".join(str(v) for v in self.env.values())
        return set(_PLACEHOLDER_RE.findall(text))

    def identity(self) -> dict[str, Any]:
        """The model part of the cache key."""
        return {
            "provider": "cli",
            "command": self.command,
            "tool_model": self.model,
            "reasoning_effort": self.reasoning_effort,
            "output_token_cap": self.output_token_cap,
            "env": dict(sorted(self.env.items())),
        }

    def key_material(self, item: PromptItem) -> dict[str, Any]:
        """What this model's answer to ``item`` is cached under (its cache key is this material's hash)."""
        return key_material(item, self.identity(), dict(self.decoding))

    def base_provenance(self) -> dict[str, Any]:
        return {
            "generation_provider": self.provider,
            "model": self.model,
            "command": self.command,
            "reasoning_effort": self.reasoning_effort,
            "output_token_cap": self.output_token_cap,
            "output_format": self.resolved_output_format,
            "decoding": dict(self.decoding),
            "tool_version": self.tool_version,
        }


@dataclass
class ToolResult:
    text: str | None
    completion_tokens: int | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None


def _fill(template: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], template)


def _tail(text: str, n: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


def parse_json_output(stdout: str, text_field: str = "result") -> ToolResult:
    """Answer and token counts from a tool's JSON output (one object, or JSON lines: the last object that has
    the text field)."""
    candidates: list[Any] = []
    try:
        candidates.append(json.loads(stdout))
    except json.JSONDecodeError:
        for line in stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    candidates.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    objs = [c for c in candidates if isinstance(c, dict) and text_field in c]
    if not objs:
        return ToolResult(None, error=f"no JSON object with a {text_field!r} field in the output: {_tail(stdout, 300)!r}")
    obj = objs[-1]
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
    tokens = None
    if usage:
        for k in ("output_tokens", "completion_tokens"):
            if isinstance(usage.get(k), int):
                tokens = usage[k]
                break
    if obj.get("is_error") is True:
        return ToolResult(None, tokens, usage, error=f"the tool reported an error: {_tail(str(obj.get(text_field)), 300)}")
    text = obj.get(text_field)
    if not isinstance(text, str):
        return ToolResult(None, tokens, usage, error=f"{text_field!r} is not a string")
    return ToolResult(text, tokens, usage)


def run_tool(entry: CliModel, item: PromptItem) -> ToolResult:
    """Run the tool once for one prompt (no retries)."""
    used = entry.placeholders_used()
    with tempfile.TemporaryDirectory(prefix="gen-cli-") as tmp:
        tmpdir = Path(tmp)
        workdir = tmpdir / "work"
        workdir.mkdir()
        values = {
            "model": str(entry.model or ""),
            "reasoning_effort": str(entry.reasoning_effort or ""),
            "output_token_cap": "" if entry.output_token_cap is None else str(entry.output_token_cap),
            "prompt_file": str(tmpdir / "prompt.txt"),
            "system_file": str(tmpdir / "system.txt"),
            "system": item.system or "",
            "answer_file": str(tmpdir / "answer.txt"),
            "workdir": str(workdir),
        }
        prompt = item.prompt
        if item.system and not ({"system", "system_file"} & used):
            prompt = item.system + "\n\n" + item.prompt
        stdin_text: str | None = prompt
        if "prompt_file" in used:
            Path(values["prompt_file"]).write_text(prompt, encoding="utf-8")
            stdin_text = None
        if "system_file" in used:
            Path(values["system_file"]).write_text(item.system or "", encoding="utf-8")
        argv = [_fill(tok, values) for tok in shlex.split(entry.command)]
        env = dict(os.environ)
        env.update({k: _fill(str(v), values) for k, v in entry.env.items()})
        try:
            proc = subprocess.run(
                argv,
                input=stdin_text,
                stdin=subprocess.DEVNULL if stdin_text is None else None,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                cwd=workdir,
                env=env,
                timeout=entry.timeout_s,
                check=False,
            )
        except FileNotFoundError:
            return ToolResult(None, error=f"command not found: {argv[0]}")
        except subprocess.TimeoutExpired:
            return ToolResult(None, error=f"timed out after {entry.timeout_s:g} s")
        if proc.returncode != 0:
            return ToolResult(None, error=f"exit code {proc.returncode}: {_tail(proc.stderr or proc.stdout)}")
        if "answer_file" in used:
            path = Path(values["answer_file"])
            output = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        else:
            output = proc.stdout
    if entry.resolved_output_format == "json" and "answer_file" not in used:
        result = parse_json_output(output, entry.json_text_field)
    else:
        result = ToolResult(output)
    if result.error is None and (result.text is None or not result.text.strip()):
        result = ToolResult(None, result.completion_tokens, result.usage, error="the tool printed no answer")
    return result


def _generate_one(
    entry: CliModel,
    item: PromptItem,
    runner: Callable[[CliModel, PromptItem], ToolResult],
    sleep: Callable[[float], None],
) -> tuple[ToolResult, int, float]:
    start = time.monotonic()
    result = ToolResult(None, error="not run")
    for attempt in range(1, entry.attempts + 1):
        result = runner(entry, item)
        if result.error is None:
            return result, attempt, time.monotonic() - start
        if attempt < entry.attempts:
            sleep(entry.backoff_s * entry.backoff_factor ** (attempt - 1))
    return result, entry.attempts, time.monotonic() - start


def generate_with_cli(
    entry: CliModel,
    name: str,
    prompts: list[PromptItem],
    cache: CompletionCache,
    *,
    offline: bool | None = None,
    allow_missing: bool = False,
    jobs: int | None = None,
    runner: Callable[[CliModel, PromptItem], ToolResult] = run_tool,
    sleep: Callable[[float], None] = time.sleep,
) -> list[CompletionRecord]:
    """One record per prompt (sorted by level, problem_id) for the model called ``name``.

    ``offline`` (default: the entry's ``offline``) never runs the tool; missing answers raise
    :class:`MissingCompletionsError` listing all of them, or with ``allow_missing`` become "missing" records.
    Online, cached good answers are reused and everything else (including earlier failures) is generated.
    """
    offline = entry.offline if offline is None else offline
    jobs = entry.parallel if jobs is None else jobs
    ordered = sorted(prompts, key=lambda i: (i.level, i.problem_id))
    records: dict[int, CompletionRecord] = {}
    todo: list[tuple[int, PromptItem, str, dict[str, Any]]] = []
    missing: list[tuple[str, int, int]] = []
    for idx, item in enumerate(ordered):
        material = entry.key_material(item)
        key = cache_key(material)
        ok = cache.get_ok(key)
        if ok is not None:
            records[idx] = ok.to_record(name, item)
        elif offline:
            failed = cache.get_failed(key)
            if failed is not None:
                records[idx] = failed.to_record(name, item)
            elif allow_missing:
                records[idx] = missing_record(name, item, key, "no cached answer (offline)", entry.base_provenance())
            else:
                missing.append((name, item.level, item.problem_id))
        else:
            todo.append((idx, item, key, material))
    if missing:
        raise MissingCompletionsError(missing)

    def work(task: tuple[int, PromptItem, str, dict[str, Any]]) -> tuple[int, CompletionRecord]:
        idx, item, key, material = task
        result, attempts, duration = _generate_one(entry, item, runner, sleep)
        prov = entry.base_provenance()
        prov.update(
            usage=result.usage,
            attempts=attempts,
            duration_s=round(duration, 3),
            generated_at=utc_now(),
        )
        if result.error is None and result.text and result.text.strip():
            e = cache.put_ok(key, material, result.text, result.completion_tokens, prov)
        else:
            e = cache.put_failed(key, material, result.error or "no answer", prov, result.completion_tokens)
        return idx, e.to_record(name, item)

    if todo:
        if jobs <= 1:
            done = [work(t) for t in todo]
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                done = list(pool.map(work, todo))
        records.update(done)
    return [records[i] for i in range(len(ordered))]


def uncached_prompts(entry: CliModel, prompts: list[PromptItem], cache: CompletionCache) -> list[PromptItem]:
    """The prompts for which the cache holds no answer of this model, good or failed: what an offline run of it
    would report missing (the start-up checks ask before any job runs)."""
    missing = []
    for item in prompts:
        key = cache_key(entry.key_material(item))
        if cache.get_ok(key) is None and cache.get_failed(key) is None:
            missing.append(item)
    return missing


# --------------------------------------------------------------------------------------------------- import


@dataclass
class ImportReport:
    imported: list[tuple[int, int]] = field(default_factory=list)
    failed: list[tuple[int, int]] = field(default_factory=list)  # empty answers, recorded as failed
    unchanged: list[tuple[int, int]] = field(default_factory=list)
    conflicts: list[tuple[int, int]] = field(default_factory=list)  # a different good answer was kept
    unknown: list[tuple[int, int]] = field(default_factory=list)  # answers for problems not in the prompts
    without_answer: list[tuple[int, int]] = field(default_factory=list)  # prompts the source has no answer for

    def to_dict(self) -> dict[str, Any]:
        return {k: [list(x) for x in v] for k, v in self.__dict__.items()}


def read_answer_source(source: Path) -> dict[tuple[int, int], tuple[str, int | None]]:
    """Answers from a directory (``level<L>_<id>.txt|.md``, optional ``meta.json`` with completion_tokens,
    as in ``demo/completions/<model>/``) or from a JSONL file (``level, problem_id, text[, completion_tokens]``)."""
    answers: dict[tuple[int, int], tuple[str, int | None]] = {}
    if source.is_dir():
        meta: dict[str, Any] = {}
        if (source / "meta.json").is_file():
            meta = json.loads((source / "meta.json").read_text(encoding="utf-8"))
        for p in sorted(source.iterdir()):
            m = _ANSWER_NAME.match(p.name)
            if not m or not p.is_file():
                continue
            ident = (int(m.group(1)), int(m.group(2)))
            if ident in answers:
                raise ValueError(f"two answer files for level {ident[0]} problem {ident[1]} in {source}")
            tokens = (meta.get(f"level{ident[0]}_{ident[1]}") or {}).get("completion_tokens")
            answers[ident] = (p.read_text(encoding="utf-8"), tokens)
    elif source.is_file():
        with open(source, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                obj = json.loads(line)
                ident = (int(obj["level"]), int(obj["problem_id"]))
                if ident in answers:
                    raise ValueError(f"{source}:{n}: second answer for level {ident[0]} problem {ident[1]}")
                text = obj.get("text")
                answers[ident] = ("" if text is None else str(text), obj.get("completion_tokens"))
    else:
        raise FileNotFoundError(f"answer source not found: {source}")
    return answers


def import_answers(
    entry: CliModel,
    name: str,
    prompts: list[PromptItem],
    cache: CompletionCache,
    source: Path | str,
    provenance: Mapping[str, Any] | None = None,
    *,
    replace: bool = False,
    allow_unknown: bool = False,
) -> ImportReport:
    """Put existing answers into the cache under the keys ``generate`` will look up for this entry.

    Empty answers are recorded as failed generations. An existing, different good answer is kept (reported as
    a conflict) unless ``replace``. Answers for problems absent from ``prompts`` are an error unless
    ``allow_unknown``.
    """
    source = Path(source)
    answers = read_answer_source(source)
    by_id = {(p.level, p.problem_id): p for p in prompts}
    report = ImportReport()
    report.unknown = sorted(set(answers) - set(by_id))
    if report.unknown and not allow_unknown:
        listed = ", ".join(f"level{lv}_{pid}" for lv, pid in report.unknown)
        raise ValueError(f"{len(report.unknown)} answer(s) in {source} match no prompt: {listed}")
    report.without_answer = sorted(set(by_id) - set(answers))
    for ident in sorted(set(answers) & set(by_id)):
        item = by_id[ident]
        text, tokens = answers[ident]
        material = entry.key_material(item)
        key = cache_key(material)
        prov = entry.base_provenance()
        prov.update(
            usage=None,
            imported_from=str(source),
            imported_at=utc_now(),
            import_provenance=dict(provenance or {}),
        )
        existing = cache.get_ok(key)
        if not text.strip():
            cache.put_failed(key, material, "imported answer is empty", prov, tokens)
            report.failed.append(ident)
        elif existing is not None and existing.text == text:
            report.unchanged.append(ident)
        elif existing is not None and not replace:
            report.conflicts.append(ident)
        else:
            cache.put_ok(key, material, text, tokens, prov, replace=True)
            report.imported.append(ident)
    return report


# ------------------------------------------------------------------------------------------------------ CLI
