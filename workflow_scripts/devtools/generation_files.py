"""The generation files as tests and benchmarks make and read them: a prompts JSONL written from PromptItems (the
pipeline writes its own with the prompts stage, stages/prompts.py), a completions JSONL read back as the records
of the contract (generation/cache.py). Standard library only: the vLLM environment's tests use it too."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from workflow_scripts.core.io import atomic_write_text
from workflow_scripts.generation.cache import CompletionRecord, PromptItem


def write_prompts_jsonl(path: Path | str, items: Iterable[PromptItem]) -> None:
    lines = []
    for it in items:
        obj = {"level": it.level, "problem_id": it.problem_id, "prompt": it.prompt, "prompt_sha256": it.prompt_sha256}
        if it.system is not None:
            obj["system"] = it.system
        lines.append(json.dumps(obj, ensure_ascii=False, sort_keys=True))
    atomic_write_text(Path(path), "\n".join(lines) + ("\n" if lines else ""))


def read_completions_jsonl(path: Path | str) -> list[CompletionRecord]:
    with open(path, encoding="utf-8") as f:
        return [CompletionRecord.from_dict(json.loads(line)) for line in f if line.strip()]
