"""The one registry of model kinds: what a configured model's ``kind`` means to the pipeline.

Every reader of ``kind`` asks this table: the rules (which rule writes a model's completions, whether its answers
must launch Triton, whether its completions folder is checked at parse time and is an input of the rule), the
generation modules (vllm.py's engine groups) and explain (where a completion comes from). The configuration
schema (schemas/config.schema.yaml) has one ``$defs`` entry per kind, with that kind's own keys;
tests/test_model_kinds.py checks that the schema's kinds are these and that each kind's rule exists.

Standard library only: generation/vllm.py imports it, and it must import in the vLLM environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class CompletionSource(Enum):
    """Where a kind's completions come from, as explain traces them."""

    FOLDER = "folder"  # raw texts in the model's `completions` folder (level<L>_<id>.txt), replayed as they are
    PROBLEM = "problem"  # the problem's own code (its class renamed ModelNew); the cache_key is the problem's sha256
    CACHE = "cache"  # the completion cache (<store>/completions, or the entry's `cache`), written by a generator


@dataclass(frozen=True)
class ModelKind:
    name: str  # the value of `kind` in the configuration
    rule: str  # the rule (and stage module, workflow_scripts.stages.<rule>) that writes its completions JSONL
    source: CompletionSource
    require_triton: bool  # whether an answer must launch a Triton kernel to be correct
    per_base_model: bool = False  # one rule per base model (completions_<rule>_<n>), not one per model
    # Its answers are the reference code (true speedup 1): the summary names it as the calibration and leaves it out
    # of the bootstrap's comparisons.
    calibration: bool = False

    @property
    def reads_folder(self) -> bool:
        """Its `completions` folder is checked when the workflow is parsed and its files are the rule's inputs."""
        return self.source is CompletionSource.FOLDER


KINDS: dict[str, ModelKind] = {kind.name: kind for kind in (
    ModelKind("cached", "completions_replay", CompletionSource.FOLDER, require_triton=True),
    # The calibration model: its answer is the reference code, so no Triton is required of it; timing it against
    # eager measures the harness's own noise and bias.
    ModelKind("reference", "completions_replay", CompletionSource.PROBLEM, require_triton=False, calibration=True),
    # One vLLM engine serves a base model and every LoRA adapter on it: one rule per base model.
    ModelKind("vllm", "completions_vllm", CompletionSource.CACHE, require_triton=True, per_base_model=True),
    ModelKind("cli", "completions_cli", CompletionSource.CACHE, require_triton=True),
)}


def kind_of(entry: Mapping[str, Any]) -> ModelKind:
    """The kind of one `models:` entry of the configuration (validated by the schema: the kind is known)."""
    try:
        return KINDS[entry["kind"]]
    except KeyError:
        raise ValueError(f"model kind {entry.get('kind')!r} is not one of {', '.join(KINDS)}") from None


def models_for_rule(models: Mapping[str, Mapping[str, Any]], rule: str) -> list[str]:
    """The names of the configured models whose completions ``rule`` writes, in configuration order."""
    return [name for name, entry in models.items() if kind_of(entry).rule == rule]


def calibration_models(models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The configured models whose answers are the reference code (``ModelKind.calibration``), in order."""
    return [name for name, entry in models.items()
            if (kind := KINDS.get(str(entry.get("kind")))) is not None and kind.calibration]
