"""Render KernelBench's prompt for a problem, byte-identical to KernelBench's own TOML prompt constructor.

The templates and example files are read from the suite itself (src/kernelbench/prompts/prompts.toml and the
files it names), so the same code renders a real KernelBench checkout and the bundled demo suite. The string
assembly mirrors ``render_prompt_by_option`` in src/kernelbench/prompt_constructor_toml.py of
ScalingIntelligence/KernelBench (pinned revision, see kernelbench.PINNED_REVISION); see ``render_prompt``.

CLI::

    python -m workflow_scripts prompt --kernelbench DIR --level 1 --problem 19 [--out FILE]
    python -m workflow_scripts prompt --kernelbench DIR --all --out-dir DIR [--levels 1 2]
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from workflow_scripts.core.hashing import sha256_bytes, sha256_text
from workflow_scripts.core.io import atomic_write_bytes
from workflow_scripts.suite.kernelbench import (
    DEFAULT_LEVELS,
    PROMPTS_TOML_REL,
    Problem,
    find_problem,
    list_problems,
    read_text,
    sha256_file,
)

# KernelBench's query_server(system_prompt=...) default, verbatim (no trailing period).
SYSTEM_MESSAGE = "You are a helpful assistant"

DEFAULT_BACKEND = "triton"
DEFAULT_OPTION = "one_shot"
DEFAULT_PRECISION = "fp32"


class PromptError(ValueError):
    """The suite's prompts.toml cannot render the requested backend/option/precision."""


@dataclass(frozen=True)
class PromptTemplates:
    """A parsed prompts.toml plus the suite root its example paths are relative to."""

    suite_dir: Path
    data: dict[str, Any]

    @classmethod
    def load(cls, suite_dir: Path | str) -> "PromptTemplates":
        suite = Path(suite_dir)
        path = suite / PROMPTS_TOML_REL
        if not path.is_file():
            raise PromptError(f"no prompt templates: {path} does not exist")
        with open(path, "rb") as f:
            try:
                data = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                raise PromptError(f"invalid TOML in {path}: {e}") from e
        return cls(suite, data)

    def compose_blocks(self, keys: Sequence[str]) -> str:
        """KernelBench's PromptConfig.compose_blocks: each block stripped + "\\n", joined by "\\n", stripped + "\\n"."""
        parts = []
        for key in keys:
            node: Any = self.data
            for part in key.split("."):
                if not isinstance(node, dict) or part not in node:
                    raise PromptError(f"prompts.toml has no template {key!r}")
                node = node[part]
            if not isinstance(node, str):
                raise PromptError(f"prompts.toml key {key!r} is not a string template")
            parts.append(node.strip() + "\n")
        return "\n".join(parts).strip() + "\n"

    def read_example(self, rel_path: str | None, what: str) -> str:
        # KernelBench resolves these against its repo root; ours is the suite root. Unlike KernelBench's
        # read_file (which returns "" for a missing file and would silently drop the example) we fail loudly.
        if not rel_path:
            raise PromptError(f"prompts.toml names no {what}")
        path = Path(rel_path)
        if not path.is_absolute():
            path = self.suite_dir / path
        if not path.is_file():
            raise PromptError(f"{what} {rel_path!r} named in prompts.toml not found at {path}")
        return read_text(path)


def _section(data: dict[str, Any], table: str, key: str, kind: str) -> dict[str, Any]:
    entries = data.get(table) or {}
    if key not in entries:
        raise PromptError(f"unknown {kind} {key!r}; prompts.toml defines: {', '.join(sorted(entries)) or 'none'}")
    return entries[key]


def render_prompt(
    suite_dir: Path | str,
    ref_arch_src: str,
    backend: str = DEFAULT_BACKEND,
    option: str = DEFAULT_OPTION,
    precision: str | None = DEFAULT_PRECISION,
) -> str:
    """The prompt KernelBench's get_prompt_for_backend(ref_arch_src, backend, option, precision) returns.

    Assembly (each step is KernelBench's, in its order; the byte details are what make the output identical):
      1. problem_statement / instruction = [shared] strings .format(backend_display=...), *not* stripped here.
      2. examples (options with requires_example): entry template and intros go through compose_blocks and
         .strip(); the entry is formatted with label "Example:" (one-shot) or "Example {i}:" (few-shot),
         entries joined by "\\n\\n" and stripped. Example files are inserted verbatim (trailing newline kept).
      3. every component: problem_statement/instruction as is, hardware_* from templates.hardware, the rest from
         templates.common via compose_blocks (strip + "\\n"); parts joined by "\\n" (hence one blank line
         between blocks), stripped + "\\n".
      4. the whole text .format(**context) — one pass, so braces inside ref_arch_src or the examples are
         safe — then .strip() + "\\n": exactly one trailing newline.
    ref_arch_src is inserted verbatim: a problem file ending in "\\n" gives one more blank line before the
    precision note than one that does not (both occur in KernelBench).
    """
    tpl = PromptTemplates.load(suite_dir)
    cfg = tpl.data
    # get_prompt_for_backend lower-cases backend and option.
    backend = backend.lower()
    option = option.lower()
    backend_data = _section(cfg, "backends", backend, "backend")
    option_data = _section(cfg, "options", option, "option")
    if option_data.get("requires_gpu"):
        raise PromptError(f"option {option!r} needs GPU hardware info, which this pipeline does not render")
    components = option_data.get("components")
    if not isinstance(components, list) or not components:
        raise PromptError(f"options.{option}.components missing or empty in prompts.toml")

    shared = cfg.get("shared", {})
    backend_display = backend_data.get("backend_display", backend.upper())
    problem_statement = shared.get("problem_statement", "").format(backend_display=backend_display)
    instruction = shared.get("instruction", "").format(backend_display=backend_display)
    context: dict[str, str] = {
        "ref_arch_src": ref_arch_src,
        "backend": backend.upper() if backend in ("cuda", "cute") else backend.capitalize(),
        "backend_display": backend_display,
        "problem_statement": problem_statement,
        "instruction": instruction,
    }

    context["precision_display"] = _precision_display(cfg, precision)
    requires_example = option_data.get("requires_example")
    if requires_example:
        context["examples_intro"], context["examples_entries"] = _examples(
            tpl, backend, backend_data, requires_example, backend_display, option)
    prompt_text = "\n".join(_component_text(tpl, component, context) for component in components).strip() + "\n"
    try:
        return prompt_text.format(**context).strip() + "\n"
    except KeyError as e:
        raise PromptError(f"prompt template placeholder {{{e.args[0]}}} has no value "
                          f"(available: {', '.join(sorted(context))})") from e


def _precision_display(cfg: dict[str, Any], precision: str | None) -> str:
    if precision:
        precision_data = _section(cfg, "precision", precision, "precision")
        return precision_data.get("precision_display", precision.upper())
    default_precision = cfg.get("meta", {}).get("default_precision", "fp32")
    precision_data = cfg.get("precision", {}).get(default_precision, {})
    return precision_data.get("precision_display", "FP32 (32-bit floating point)")


def _examples(tpl: PromptTemplates, backend: str, backend_data: dict[str, Any], requires_example: str,
              backend_display: str, option: str) -> tuple[str, str]:
    """(examples_intro, examples_entries) of an option that requires examples (step 2 of render_prompt)."""
    shared = tpl.data.get("shared", {})
    entry_template = tpl.compose_blocks(["templates.common.example_entry_template"]).strip()
    intro = tpl.compose_blocks(["templates.common.example_intro_one_shot"]).strip()
    intro = intro.format(backend_display=backend_display)

    def entry(input_code: str, output_code: str, label: str) -> str:
        return entry_template.format(
            example_label=label, input_code=input_code, output_code=output_code, backend_display=backend_display
        )

    def one_shot_entry() -> str:
        arch = backend_data.get("few_shot_example_arch") or shared.get("few_shot_example_arch")
        return entry(
            tpl.read_example(arch, "example architecture (few_shot_example_arch)"),
            tpl.read_example(backend_data.get("one_shot_new_arch"), f"backends.{backend}.one_shot_new_arch"),
            "Example:",
        )

    entries: list[str] = []
    if requires_example == "few_shot":
        few = backend_data.get("few_shot_examples")
        if few:
            intro = tpl.compose_blocks(["templates.common.example_intro_few_shot"]).strip()
            intro = intro.format(backend_display=backend_display)
            for i, (inp, out) in enumerate(few, 1):
                entries.append(entry(tpl.read_example(inp, "few-shot input"),
                                     tpl.read_example(out, "few-shot output"), f"Example {i}:"))
        else:  # KernelBench falls back to the one-shot pair
            entries.append(one_shot_entry())
    elif requires_example == "one_shot":
        entries.append(one_shot_entry())
    if not entries:
        raise PromptError(f"no example entries could be constructed for option {option!r} "
                          f"(requires_example={requires_example!r})")
    return intro, "\n\n".join(entries).strip()


def _component_text(tpl: PromptTemplates, component: str, context: dict[str, str]) -> str:
    """One component of the prompt (step 3 of render_prompt)."""
    if component in ("problem_statement", "instruction"):
        return context[component]
    if component.startswith("hardware_"):
        return tpl.compose_blocks([f"templates.hardware.{component}"])
    return tpl.compose_blocks([f"templates.common.{component}"])


def render_problem_prompt(
    suite_dir: Path | str,
    level: int,
    problem_id: int,
    backend: str = DEFAULT_BACKEND,
    option: str = DEFAULT_OPTION,
    precision: str | None = DEFAULT_PRECISION,
) -> str:
    """The prompt for problem `problem_id` of `level` in the suite."""
    problem = find_problem(suite_dir, level, problem_id)
    return render_prompt(suite_dir, problem.source(suite_dir), backend, option, precision)

def render_suite_prompts(suite: Path, problems: Any, backend: str, option: str, precision: str) -> list[dict[str, Any]]:
    """One prompts-JSONL line per row of the problem table: level, problem_id, system, prompt, prompt_sha256."""
    return [prompt_line(suite, int(row.level), int(row.problem_id), suite / row.path, backend, option, precision)
            for row in problems.itertuples()]


def suite_prompt_lines(suite: Path | str, problems: Mapping[tuple[int, int], str], prompt: Mapping[str, str]
                       ) -> list[dict[str, Any]]:
    """The prompts-JSONL lines of ``problems`` ((level, id) -> problem file) under ``prompt`` (config["prompt"]), as
    the prompts stage writes them: what the start-up checks look the caches up with before that stage has run."""
    return [prompt_line(Path(suite), level, problem_id, Path(path), prompt["backend"], prompt["option"],
                        prompt["precision"]) for (level, problem_id), path in problems.items()]


def prompt_line(suite: Path, level: int, problem_id: int, problem_file: Path, backend: str, option: str,
                precision: str) -> dict[str, Any]:
    """One problem's prompts-JSONL line (the prompts stage's, and the start-up checks' when no stage ran yet)."""
    prompt = render_prompt(suite, Path(problem_file).read_text(encoding="utf-8"), backend, option, precision)
    return {"level": level, "problem_id": problem_id, "system": SYSTEM_MESSAGE, "prompt": prompt,
            "prompt_sha256": sha256_text(prompt)}



def prompt_filename(problem: Problem) -> str:
    return f"level{problem.level}_{problem.problem_id}.txt"


def render_all(
    suite_dir: Path | str,
    out_dir: Path | str,
    levels: Sequence[int] = DEFAULT_LEVELS,
    backend: str = DEFAULT_BACKEND,
    option: str = DEFAULT_OPTION,
    precision: str | None = DEFAULT_PRECISION,
) -> dict[str, Any]:
    """Write level<L>_<id>.txt for every problem plus index.json (settings, hashes, one entry per prompt)."""
    suite = Path(suite_dir)
    out = Path(out_dir)
    entries = []
    for problem in list_problems(suite, levels):
        data = render_prompt(suite, problem.source(suite), backend, option, precision).encode("utf-8")
        name = prompt_filename(problem)
        atomic_write_bytes(out / name, data)
        entries.append({
            "level": problem.level,
            "problem_id": problem.problem_id,
            "problem": problem.name,
            "path": problem.path,
            "problem_sha256": problem.sha256,
            "prompt_file": name,
            "prompt_sha256": sha256_bytes(data),
        })
    index = {
        "backend": backend,
        "option": option,
        "precision": precision,
        "system_message": SYSTEM_MESSAGE,
        "prompts_toml_sha256": sha256_file(suite / PROMPTS_TOML_REL),
        "prompts": entries,
    }
    atomic_write_bytes(out / "index.json", (json.dumps(index, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return index
