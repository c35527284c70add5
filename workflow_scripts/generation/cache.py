"""Content-addressed completion cache and the completions JSONL contract.

Shared by the generation kinds (``generation.vllm`` for local weights, ``generation.cli_tool`` for command-line
tools). Only the standard library (and ``workflow_scripts.core``) is used, so this module imports anywhere.

Cache layout (``root`` is e.g. ``<store>/completions``)::

    <root>/<aa>/<key>.json          an answer that is good: status "ok", non-empty text (never anything else)
    <root>/<aa>/<key>.failed.json   the latest failed attempt for that key (kept apart, so a failure can never
                                    overwrite or shadow a good answer)
    <root>/folder_digests.json      memo of model/adapter folder digests, keyed by path, sizes and mtimes

``key = sha256(cache_json(key_material))`` where ``key_material`` holds the prompt's sha256, the system
message, the model identity (vLLM: the base weights' folder digest, the adapter folder's digest and the dtype;
CLI: the command template, the tool's model name, reasoning_effort, output_token_cap, the environment template)
and every decoding setting (temperature, top_p, top_k, max_tokens, seed, chat template kwargs). Changing any of
them, including one byte of an adapter, gives a new key, so stale answers are never reused.

All writes are atomic (temporary file in the same folder, fsync, ``os.replace``).

Completions JSONL (``<results>/completions/<model>.jsonl``), one line per problem, sorted by (level, problem_id)::

    {"model", "level", "problem_id", "status": "ok"|"failed"|"missing", "text": str|null,
     "completion_tokens": int|null, "prompt_sha256", "cache_key", "error": str|null, "provenance": {...}}

``status`` "ok" always has a non-empty ``text``; "failed" (the generator ran and gave no usable answer) and
"missing" (no answer exists and none was generated) have ``text`` null and an ``error``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workflow_scripts.core.hashing import cache_json, sha256_text
from workflow_scripts.core.io import atomic_write_text

CACHE_SCHEMA = 1
STATUSES = ("ok", "failed", "missing")
RECORD_KEYS = (
    "model",
    "level",
    "problem_id",
    "status",
    "text",
    "completion_tokens",
    "prompt_sha256",
    "cache_key",
    "error",
    "provenance",
)
_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------------------- hashing


def cache_key(material: dict[str, Any]) -> str:
    return sha256_text(cache_json(material))


def _folder_files(folder: Path) -> list[tuple[str, Path]]:
    """Regular files under ``folder`` (symlinks followed), as (relative POSIX path, path), sorted.

    Names starting with a dot (e.g. ``.cache/`` left by hub downloads, ``.git``) are skipped at any depth.
    """
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith("."):
                continue
            p = Path(dirpath) / name
            if p.is_file():
                out.append((p.relative_to(folder).as_posix(), p))
    out.sort()
    return out


def _folder_stat(files: list[tuple[str, Path]]) -> list[list[Any]]:
    stats = []
    for rel, p in files:
        st = p.stat()
        stats.append([rel, st.st_size, st.st_mtime_ns])
    return stats


def folder_digest(folder: Path | str, memo_path: Path | str | None = None) -> str:
    """sha256 over a folder's files: each file's relative name, size and bytes (streamed), in sorted order.

    With ``memo_path``, the digest is memoized in that small JSON sidecar, keyed by the folder's resolved path
    and the (name, size, mtime_ns) of every file, so an unchanged folder is not re-read on every run; any change
    of a name, a size or an mtime recomputes it.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder not found: {folder}")
    resolved = str(folder.resolve())
    files = _folder_files(folder)
    if not files:
        raise FileNotFoundError(f"model folder is empty: {folder}")
    stats = _folder_stat(files)
    memo: dict[str, Any] = {}
    if memo_path is not None:
        memo_path = Path(memo_path)
        try:
            memo = json.loads(memo_path.read_text())
        except (FileNotFoundError, ValueError):
            memo = {}
        hit = memo.get(resolved)
        if isinstance(hit, dict) and hit.get("files") == stats and isinstance(hit.get("sha256"), str):
            return hit["sha256"]
    h = hashlib.sha256()
    h.update(b"folder-digest-v1\0")
    for rel, p in files:
        size = p.stat().st_size
        h.update(rel.encode("utf-8") + b"\0" + str(size).encode() + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    digest = h.hexdigest()
    if memo_path is not None:
        # Re-read just before writing so concurrent runs lose at most a memo entry, never corrupt the file.
        try:
            memo = json.loads(Path(memo_path).read_text())
        except (FileNotFoundError, ValueError):
            memo = {}
        memo[resolved] = {"files": stats, "sha256": digest}
        atomic_write_text(Path(memo_path), json.dumps(memo, indent=1, sort_keys=True) + "\n")
    return digest


# ------------------------------------------------------------------------------------------------- records


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class PromptItem:
    """One problem's prompt. ``prompt_sha256`` is the sha256 of ``prompt`` (UTF-8)."""

    level: int
    problem_id: int
    prompt: str
    system: str | None = None

    @property
    def prompt_sha256(self) -> str:
        return sha256_text(self.prompt)

    @classmethod
    def from_line(cls, obj: dict[str, Any]) -> PromptItem:
        """One prompts-JSONL line (``level``, ``problem_id``, ``prompt`` or ``text``, optional ``system`` and
        ``prompt_sha256``, checked when present), as the prompts stage writes it."""
        prompt = obj.get("prompt", obj.get("text"))
        if not isinstance(prompt, str) or not prompt:
            raise ValueError("no prompt text")
        item = cls(int(obj["level"]), int(obj["problem_id"]), prompt, obj.get("system"))
        if obj.get("prompt_sha256") and obj["prompt_sha256"] != item.prompt_sha256:
            raise ValueError("prompt_sha256 does not match the prompt text")
        return item

    @property
    def label(self) -> str:
        return f"level{self.level}_{self.problem_id}"


def read_prompts_jsonl(path: Path | str) -> list[PromptItem]:
    """Read prompts: one JSON object a line with ``level``, ``problem_id``, ``prompt`` (or ``text``), optional
    ``system`` and optional ``prompt_sha256`` (checked when present). Duplicates are an error."""
    items: list[PromptItem] = []
    seen: set[tuple[int, int]] = set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            try:
                item = PromptItem.from_line(obj)
            except ValueError as e:
                raise ValueError(f"{path}:{n}: {e}") from None
            if (item.level, item.problem_id) in seen:
                raise ValueError(f"{path}:{n}: duplicate prompt for level {item.level} problem {item.problem_id}")
            seen.add((item.level, item.problem_id))
            items.append(item)
    return items


@dataclass(frozen=True)
class Decoding:
    """Decoding settings. All of them enter the cache key. Defaults are the study's (greedy, no thinking)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = disabled
    max_tokens: int = 8192
    seed: int | None = 0
    chat_template_kwargs: dict[str, Any] = field(default_factory=lambda: {"enable_thinking": False})

    def to_dict(self) -> dict[str, Any]:
        return {
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "top_k": int(self.top_k),
            "max_tokens": int(self.max_tokens),
            "seed": self.seed,
            "chat_template_kwargs": dict(self.chat_template_kwargs),
        }


@dataclass
class CompletionRecord:
    """One line of ``<results>/completions/<model>.jsonl``."""

    model: str
    level: int
    problem_id: int
    status: str
    text: str | None
    completion_tokens: int | None
    prompt_sha256: str
    cache_key: str
    error: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.status == "ok" and (not isinstance(self.text, str) or not self.text.strip()):
            raise ValueError("a record with status 'ok' needs a non-empty text")
        if self.status != "ok" and self.text is not None:
            raise ValueError("only records with status 'ok' carry text")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in RECORD_KEYS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompletionRecord:
        return cls(**{k: d.get(k) for k in RECORD_KEYS if k != "provenance"}, provenance=d.get("provenance") or {})


def write_completions_jsonl(path: Path | str, records: Iterable[CompletionRecord]) -> Path:
    recs = sorted(records, key=lambda r: (r.level, r.problem_id))
    text = "".join(json.dumps(r.to_dict(), ensure_ascii=False, sort_keys=True) + "\n" for r in recs)
    atomic_write_text(Path(path), text)
    return Path(path)


def write_answer_files(records: Iterable[CompletionRecord], out_dir: Path | str) -> Path:
    """Also lay the answers out like ``demo/completions/<model>/``: ``level<L>_<id>.txt`` for each ok record
    plus ``meta.json`` with completion_tokens. Failed/missing problems get no file (= missing completion)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {}
    for r in records:
        name = f"level{r.level}_{r.problem_id}"
        path = out / f"{name}.txt"
        if r.status == "ok":
            atomic_write_text(path, r.text or "")
            meta[name] = {"completion_tokens": r.completion_tokens}
        elif path.exists():
            path.unlink()
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return out


class MissingCompletionsError(RuntimeError):
    """Offline mode found no cached answer for some problems. ``missing`` lists (model, level, problem_id)."""

    def __init__(self, missing: list[tuple[str, int, int]]):
        self.missing = sorted(missing)
        lines = [f"  {m} level {lv} problem {pid}" for m, lv, pid in self.missing]
        super().__init__(
            f"{len(self.missing)} completion(s) are not in the cache and offline mode forbids generating them:\n"
            + "\n".join(lines)
        )


# --------------------------------------------------------------------------------------------------- cache


@dataclass
class CacheEntry:
    cache_key: str
    status: str  # "ok" | "failed"
    text: str | None
    completion_tokens: int | None
    error: str | None
    provenance: dict[str, Any]
    key_material: dict[str, Any]

    def to_record(self, model: str, item: PromptItem) -> CompletionRecord:
        return CompletionRecord(
            model=model,
            level=item.level,
            problem_id=item.problem_id,
            status=self.status,
            text=self.text if self.status == "ok" else None,
            completion_tokens=self.completion_tokens,
            prompt_sha256=item.prompt_sha256,
            cache_key=self.cache_key,
            error=self.error,
            provenance=self.provenance,
        )


class CompletionCache:
    """Completions keyed by :func:`cache_key`. Good answers live in ``<aa>/<key>.json``; failures in
    ``<aa>/<key>.failed.json``. A failure never overwrites, removes or hides a good answer."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    @property
    def digest_memo(self) -> Path:
        return self.root / "folder_digests.json"

    def folder_digest(self, folder: Path | str) -> str:
        with self._lock:
            return folder_digest(folder, self.digest_memo)

    def _path(self, key: str, failed: bool = False) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a sha256 key: {key!r}")
        return self.root / key[:2] / (key + (".failed.json" if failed else ".json"))

    def _load(self, path: Path) -> CacheEntry | None:
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return CacheEntry(
            cache_key=d["cache_key"],
            status=d["status"],
            text=d.get("text"),
            completion_tokens=d.get("completion_tokens"),
            error=d.get("error"),
            provenance=d.get("provenance") or {},
            key_material=d.get("key_material") or {},
        )

    def get_ok(self, key: str) -> CacheEntry | None:
        e = self._load(self._path(key))
        if e is not None and (e.status != "ok" or not (e.text or "").strip()):
            return None  # defensive: never serve a non-answer as an answer
        return e

    def get_failed(self, key: str) -> CacheEntry | None:
        return self._load(self._path(key, failed=True))

    def get(self, key: str) -> CacheEntry | None:
        """The good answer if there is one, else the latest recorded failure, else None."""
        return self.get_ok(key) or self.get_failed(key)

    def put_ok(
        self,
        key: str,
        material: dict[str, Any],
        text: str,
        completion_tokens: int | None,
        provenance: dict[str, Any],
        *,
        replace: bool = False,
    ) -> CacheEntry:
        """Store a good answer. Empty/blank text is refused (ValueError): record it with put_failed instead.
        An existing good answer is kept (first write wins) unless ``replace``."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("refusing to cache an empty answer as ok")
        if cache_key(material) != key:
            raise ValueError("cache key does not match its key material")
        with self._lock:
            existing = self.get_ok(key)
            if existing is not None and not replace:
                return existing
            entry = {
                "schema": CACHE_SCHEMA,
                "cache_key": key,
                "status": "ok",
                "text": text,
                "completion_tokens": completion_tokens,
                "error": None,
                "provenance": provenance,
                "key_material": material,
            }
            atomic_write_text(self._path(key), json.dumps(entry, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
            failed = self._path(key, failed=True)
            if failed.exists():
                failed.unlink()
            return self.get_ok(key)  # type: ignore[return-value]

    def put_failed(
        self,
        key: str,
        material: dict[str, Any],
        error: str,
        provenance: dict[str, Any],
        completion_tokens: int | None = None,
    ) -> CacheEntry:
        """Record a failed generation. If a good answer exists it is left untouched and returned."""
        if cache_key(material) != key:
            raise ValueError("cache key does not match its key material")
        with self._lock:
            existing = self.get_ok(key)
            if existing is not None:
                return existing
            entry = {
                "schema": CACHE_SCHEMA,
                "cache_key": key,
                "status": "failed",
                "text": None,
                "completion_tokens": completion_tokens,
                "error": error or "generation failed",
                "provenance": provenance,
                "key_material": material,
            }
            path = self._path(key, failed=True)
            atomic_write_text(path, json.dumps(entry, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
            return self._load(path)  # type: ignore[return-value]


def key_material(item: PromptItem, model_identity: dict[str, Any], decoding: dict[str, Any]) -> dict[str, Any]:
    """What a completion depends on. ``model_identity`` and ``decoding`` are plain JSON dicts."""
    return {
        "schema": CACHE_SCHEMA,
        "prompt_sha256": item.prompt_sha256,
        "system": item.system,
        "model": model_identity,
        "decoding": decoding,
    }


def missing_record(model: str, item: PromptItem, key: str, error: str, provenance: dict[str, Any]) -> CompletionRecord:
    return CompletionRecord(
        model=model,
        level=item.level,
        problem_id=item.problem_id,
        status="missing",
        text=None,
        completion_tokens=None,
        prompt_sha256=item.prompt_sha256,
        cache_key=key,
        error=error,
        provenance=provenance,
    )


def publish_completions(name: str, records: list[CompletionRecord], out_dir: Path, answers_root: Path | None) -> Path:
    """Write <out_dir>/<name>.jsonl (and the answer-file layout under answers_root) and report the counts."""
    out = Path(out_dir) / f"{name}.jsonl"
    write_completions_jsonl(out, records)
    if answers_root:
        write_answer_files(records, Path(answers_root) / name)
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status] = counts.get(record.status, 0) + 1
    print(f"{name}: {len(records)} problems {counts} -> {out}", file=sys.stderr)
    return out
