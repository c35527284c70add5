"""Start-up checks of the models' generation, run when the workflow is parsed, before any job: what each kind's
completions job needs that the configuration and the disk alone show missing. Without them the study's dry run
plans 3,000 jobs that cannot run, and each fails only inside its job (issue 36).

* ``vllm``: the base model's folder (once per engine: the models on one base model generate in one engine) and
  each adapter's (a LoRA adapter: ``adapter_config.json``), and the settings an engine's models share
  (``decoding``, ``engine``, ``offline``: an adapter with its own ``max_tokens`` cannot run in its base's engine);
* ``cli`` (offline, the default): every prompt of the run has a cached answer (good or failed) of that model.

Each finding names the configuration key it is about; the workflow (rules/common.smk) turns it into a line naming
the file and the line. Only models whose completions are still to be written are checked: a finished model's
folders may be gone (a reviewer rebuilding from its completions needs no 27B model on disk).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.generation.cache import CompletionCache, PromptItem
from workflow_scripts.generation.cli_tool import CliModel, uncached_prompts
from workflow_scripts.generation.kinds import kind_of

# The keys the models on one base model share: one engine generates for all of them (generation/vllm.py plan_engine).
ENGINE_SHARED_KEYS = ("decoding", "engine", "offline")
ADAPTER_CONFIG = "adapter_config.json"
MISSING_LISTED = 5  # the first missing answers named in a message


@dataclass(frozen=True)
class StartupProblem:
    """One reason a model's completions job cannot run."""

    keys: tuple[str, ...]  # the configuration key it is about, e.g. ("models", "sft", "adapter")
    message: str


@dataclass
class RunContext:
    """What the checks may ask of the run: its prompts (prompts-JSONL lines as the prompts stage writes them,
    rendered once, only when a check needs them; None while the suite is still to be fetched) and each model's
    completion cache folder."""

    render_prompts: Callable[[], list[dict[str, Any]]] | None
    cache_of: Mapping[str, Path]
    _prompts: list[PromptItem] | None = None

    def prompts(self) -> list[PromptItem] | None:
        if self._prompts is None and self.render_prompts is not None:
            self._prompts = [PromptItem.from_line(line) for line in self.render_prompts()]
        return self._prompts


def vllm_problems(name: str, entry: Mapping[str, Any], run: RunContext) -> list[StartupProblem]:
    """A vLLM model's adapter on disk (its cache key holds the adapter's digest: no folder, no answer). The base
    model's folder is its engine's (``engine_problems``)."""
    adapter = entry.get("adapter")
    if adapter is None:
        return []
    folder = Path(str(adapter))
    if not folder.is_dir():
        return [StartupProblem(("models", name, "adapter"), f"model {name}: the adapter folder {folder} does not exist")]
    if not (folder / ADAPTER_CONFIG).is_file():
        return [StartupProblem(("models", name, "adapter"),
                               f"model {name}: {folder} is not a LoRA adapter folder (no {ADAPTER_CONFIG})")]
    return []


def cli_problems(name: str, entry: Mapping[str, Any], run: RunContext) -> list[StartupProblem]:
    """An offline command-line model whose cache misses answers of this run."""
    model = CliModel.from_model_entry(entry)
    prompts = run.prompts()
    if not model.offline or prompts is None:
        return []
    cache_root = run.cache_of[name]
    missing = uncached_prompts(model, prompts, CompletionCache(cache_root))
    if not missing:
        return []
    listed = ", ".join(item.label for item in missing[:MISSING_LISTED])
    more = f" and {len(missing) - MISSING_LISTED} more" if len(missing) > MISSING_LISTED else ""
    key = ("models", name, "offline") if "offline" in entry else ("models", name)
    return [StartupProblem(key, (
        f"model {name} is offline (it never runs its tool) and the completion cache {cache_root} has no answer of "
        f"it for {len(missing)} of the run's {len(prompts)} prompts ({listed}{more}): import its answers "
        f"(python -m workflow_scripts generate-cli import, docs/generation.md) or set offline: false"))]


def engine_problems(models: Mapping[str, Mapping[str, Any]], pending: set[str]) -> list[StartupProblem]:
    """Per vLLM engine (the models on one base model) with a model still to generate: its base model's folder, and
    the settings each model shares with the engine's first."""
    groups: dict[str, list[str]] = {}
    for name, entry in models.items():
        if kind_of(entry).per_base_model:
            groups.setdefault(str(entry["base_model"]), []).append(name)
    found = []
    for base, names in groups.items():
        waiting = [name for name in names if name in pending]
        if not waiting:
            continue
        if not Path(base).is_dir():
            found.append(StartupProblem(("models", waiting[0], "base_model"),
                                        f"the base model folder {base} does not exist (models {', '.join(names)} "
                                        f"generate from it)"))
        first = models[names[0]]
        found += [StartupProblem(("models", name, key),
                                 f"model {name}: {key} {models[name].get(key)!r} differs from model {names[0]}'s "
                                 f"{first.get(key)!r}; both run on base model {base} in one vLLM engine, which needs "
                                 f"one {key}")
                  for name in names[1:] for key in ENGINE_SHARED_KEYS if models[name].get(key) != first.get(key)]
    return found


# What is checked of each generating kind (generation/kinds.py: the kinds whose completions come from the cache).
KIND_CHECKS: dict[str, Callable[[str, Mapping[str, Any], RunContext], list[StartupProblem]]] = {
    "vllm": vllm_problems, "cli": cli_problems}


def startup_problems(models: Mapping[str, Mapping[str, Any]], pending: set[str], run: RunContext
                     ) -> list[StartupProblem]:
    """Every start-up problem of the models whose completions are ``pending`` (still to be written), in
    configuration order."""
    found = engine_problems(models, pending)
    for name, entry in models.items():
        check = KIND_CHECKS.get(kind_of(entry).name)
        if name in pending and check is not None:
            found += check(name, entry, run)
    return found
