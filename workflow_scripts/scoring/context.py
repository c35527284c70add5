"""The summary's context: what the rows cannot say (the benchmark block and protocol, the runtime, the models'
labels and generation provenance), from the workflow's configuration (``build_context``) or a JSON file.

Context JSON (``--context``; every key optional, unknown keys are rejected to catch typos)::

    {
      "title": "...",                       # copied to the top of the summary
      "benchmark": {...},                   # protocol etc., copied verbatim to summary.benchmark
      "runtime": {...},                     # software / GPU of the run -> summary.benchmark.runtime
      "models": {                           # key order = model order of the summary
        "<model>": {"label": "...", "generation": {...}}   # both optional, copied verbatim
      },
      "notes": {"paired_bootstrap": "...", "level2_strategy": "..."}   # appended to the generated notes
    }

``runtime`` is nested inside ``benchmark`` because that is where the published file keeps it. Models named in
the context but absent from the rows are ignored; models in the rows but not in the context follow, in order of
first appearance.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONTEXT_KEYS = frozenset({"title", "benchmark", "runtime", "models", "notes"})
CONTEXT_MODEL_KEYS = frozenset({"label", "generation"})
CONTEXT_NOTE_KEYS = frozenset({"paired_bootstrap", "level2_strategy"})


@dataclass(frozen=True)
class ModelContext:
    label: str | None = None
    generation: dict[str, Any] | None = None


@dataclass(frozen=True)
class SummaryContext:
    """What the rows cannot say: protocol, runtime, model labels and generation provenance (schema above)."""

    title: str | None = None
    benchmark: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] | None = None
    models: dict[str, ModelContext] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def parse_context(data: Mapping[str, Any] | None) -> SummaryContext:
    """Validate the context object (schema in the module docstring) and turn it into a SummaryContext."""
    if data is None:
        return SummaryContext()
    if not isinstance(data, Mapping):
        raise ValueError("context must be a JSON object")
    unknown = set(data) - CONTEXT_KEYS
    if unknown:
        raise ValueError(f"unknown context keys {sorted(unknown)}; allowed: {sorted(CONTEXT_KEYS)}")
    for key in ("benchmark", "runtime", "models", "notes"):
        if key in data and data[key] is not None and not isinstance(data[key], Mapping):
            raise ValueError(f"context.{key} must be an object")
    models: dict[str, ModelContext] = {}
    for name, entry in (data.get("models") or {}).items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"context.models.{name} must be an object")
        bad = set(entry) - CONTEXT_MODEL_KEYS
        if bad:
            raise ValueError(
                f"unknown keys {sorted(bad)} in context.models.{name}; allowed: {sorted(CONTEXT_MODEL_KEYS)}"
            )
        generation = entry.get("generation")
        if generation is not None and not isinstance(generation, Mapping):
            raise ValueError(f"context.models.{name}.generation must be an object")
        models[str(name)] = ModelContext(entry.get("label"), dict(generation) if generation is not None else None)
    notes = dict(data.get("notes") or {})
    bad = set(notes) - CONTEXT_NOTE_KEYS
    if bad:
        raise ValueError(f"unknown keys {sorted(bad)} in context.notes; allowed: {sorted(CONTEXT_NOTE_KEYS)}")
    runtime = data.get("runtime")
    return SummaryContext(
        title=data.get("title"),
        benchmark=dict(data.get("benchmark") or {}),
        runtime=dict(runtime) if runtime is not None else None,
        models=models,
        notes={k: str(v) for k, v in notes.items()},
    )


def runtime_block(environment: dict[str, Any]) -> dict[str, Any]:
    """What the published runtime block holds (torch, triton, cuda, python, gpu), then the full fingerprint."""
    runtime = {key: environment.get(key) for key in ("device", "torch", "triton", "cuda", "python", "gpu")}
    runtime.update({k: v for k, v in environment.items() if k not in runtime})
    return runtime


def build_context(settings: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    """The summary context from the workflow's config blocks (models, model_order, summary, suite, prompt,
    evaluation, baselines) and the environment fingerprint."""
    benchmark = dict(settings["summary"].get("benchmark") or {})
    benchmark["settings"] = {
        "suite": {k: settings["suite"].get(k) for k in ("path", "levels", "revision")},
        "prompt": settings["prompt"],
        # What the protocol is, not how much memory a job reserves.
        "evaluation": {k: v for k, v in settings["evaluation"].items() if k != "memory_gb"},
        "baselines": settings["baselines"],
        "bootstrap": {k: settings["summary"][k] for k in ("reference", "resamples", "seed")},
    }
    models = {}
    # The settings travel as sorted JSON; the config's order of models is kept separately.
    for name in settings.get("model_order") or list(settings["models"]):
        model = settings["models"][name]
        entry: dict[str, Any] = {}
        if "label" in model:
            entry["label"] = model["label"]
        if "generation" in model:
            entry["generation"] = model["generation"]
        models[name] = entry
    return {"benchmark": benchmark, "runtime": runtime_block(environment), "models": models}


def load_context(path: Path | None) -> SummaryContext:
    return parse_context(None if path is None else json.loads(Path(path).read_text()))
