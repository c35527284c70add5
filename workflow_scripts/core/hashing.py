"""sha256 helpers and the two canonical JSON encodings, named by use.

The store and the completion cache hash JSON differently (ASCII-escaped vs UTF-8 kept as is). Both are kept,
byte-identical to what they were: merging them would re-key the completion cache, whose CLI answers cost money to
regenerate.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

HASH_CHUNK = 1 << 20


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode("utf-8"))


def sha256_optional_text(text: str | None) -> str | None:
    """The sha256 of a text that may be absent (no completion, no code): absent stays None."""
    return None if text is None else sha256_text(text)


def sha256_file(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def store_json(value: Any) -> str:
    """The store's keys: sorted keys, no whitespace, ASCII only. The same value always hashes the same."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def cache_json(value: Any) -> str:
    """The completion cache's keys: sorted keys, no whitespace, UTF-8 kept as is (the text that is hashed)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
