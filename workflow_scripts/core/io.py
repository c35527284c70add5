"""Atomic, deterministic file writers: every artifact goes through these, so equal content means equal bytes and a
reader never sees a half-written file (the temporary file is renamed into place)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflow_scripts.core import columns

if TYPE_CHECKING:  # pandas stays out of the vLLM environment's imports
    import pandas as pd


@contextlib.contextmanager
def locked_file(path: Path | str, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created with its folder) for the ``with`` block: one holder at a time
    across processes (and across open files of one process); the lock vanishes with a holder that dies. Yields
    whether it is held: always once waited for, and with ``wait=False`` only where no one else held it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write through a unique temporary file in the same folder, fsync it, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    # Bytes, not text mode: no newline translation, so the file holds exactly `text` in UTF-8.
    atomic_write_bytes(path, text.encode("utf-8"))


def finite_json(value: Any) -> Any:
    """JSON has no NaN or infinity: non-finite floats become their names as strings ("nan", "inf", "-inf"),
    so a NaN output difference stays visible instead of passing as a number."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def json_text(value: Any, *, ensure_ascii: bool = True) -> str:
    """Deterministic JSON document (sorted keys, indent 1, trailing newline; non-finite floats as strings)."""
    return json.dumps(finite_json(value), sort_keys=True, indent=1, allow_nan=False, ensure_ascii=ensure_ascii) + "\n"


def write_json(path: Path | str, value: Any, *, ensure_ascii: bool = True) -> None:
    atomic_write_text(path, json_text(value, ensure_ascii=ensure_ascii))


def _plain(record: Any) -> Any:
    return asdict(record) if is_dataclass(record) and not isinstance(record, type) else record


def jsonl_text(records: Iterable[Any], *, ensure_ascii: bool = True) -> str:
    """One JSON object per line (dataclasses as dicts), sorted keys."""
    return "".join(json.dumps(_plain(r), sort_keys=True, ensure_ascii=ensure_ascii) + "\n" for r in records)


def write_jsonl(path: Path | str, records: Iterable[Any], *, ensure_ascii: bool = True) -> None:
    atomic_write_text(path, jsonl_text(records, ensure_ascii=ensure_ascii))


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def write_parquet(path: Path | str, frame: pd.DataFrame, table: str) -> None:
    """Parquet without pandas' index and with stable row order, so equal tables give equal bytes. ``table`` names
    the kind of file in core/columns.py: every column's description and unit go into its Arrow field's metadata
    (keys ``description``, ``unit``), the table's into the schema's (``table``, ``description``). A column without
    a definition there is an error naming it, raised before anything is written."""
    import pyarrow as pa  # lazily: core imports only the standard library at module level
    import pyarrow.parquet as pq

    path = Path(path)
    spec = columns.table(table)
    frame = frame.reset_index(drop=True)
    described = columns.definitions(table, [str(c) for c in frame.columns])
    arrow = pa.Table.from_pandas(frame, preserve_index=False)
    fields = [field.with_metadata({"description": described[field.name].description,
                                   "unit": described[field.name].unit}) for field in arrow.schema]
    schema_metadata = dict(arrow.schema.metadata or {})  # pandas' own entry restores its dtypes on reading
    schema_metadata.update({b"table": table.encode(), b"description": spec.description.encode()})
    arrow = pa.Table.from_arrays(arrow.columns, schema=pa.schema(fields, metadata=schema_metadata))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(arrow, tmp, compression="zstd")
    os.replace(tmp, path)
