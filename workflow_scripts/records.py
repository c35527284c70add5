"""Records passed between stages (the completions record is completion_cache.CompletionRecord), and the small I/O
helpers every stage CLI shares."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.store import sha256_bytes, sha256_file


@dataclass
class AnswerRecord:
    """The extraction stage's row: what code (if any) a completion yields."""

    model: str
    level: int
    problem_id: int
    completion_status: str  # ok | failed | missing
    completion_sha256: str | None
    completion_tokens: int | None
    extract_status: str  # ok | no_code | missing_completion
    code: str | None
    code_sha256: str | None
    require_triton: bool = True


def problem_key(level: int, problem_id: int) -> str:
    return f"level{level}_{problem_id}"


def text_sha256(text: str | None) -> str | None:
    return None if text is None else sha256_bytes(text.encode("utf-8"))


def write_jsonl(path: Path, records: Iterable[Any]) -> None:
    lines = [json.dumps(asdict(r) if hasattr(r, "__dataclass_fields__") else r, sort_keys=True) for r in records]
    path.write_text("".join(line + "\n" for line in lines))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def write_parquet(path: Path, frame: pd.DataFrame) -> None:
    """Parquet without pandas' index and with stable row order, so equal tables give equal bytes."""
    frame.reset_index(drop=True).to_parquet(path, index=False, compression="zstd")


def input_hashes(paths: dict[str, Path | str]) -> dict[str, str]:
    """Content hashes of a stage's input files, keyed by role (never by path: paths do not determine output)."""
    return {role: sha256_file(Path(path)) for role, path in sorted(paths.items())}
