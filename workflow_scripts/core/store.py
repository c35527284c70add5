"""Content-addressed artifact store.

Every artifact the pipeline produces is stored once under the sha256 of what determines it (the stage name,
the stage's code version, its parameters and the content hashes of its inputs; timings add the environment
fingerprint). Readable names under ``results/`` are hard links to those objects (copies where the file system
refuses links), and a manifest entry per readable name records name, key, content sha256, stage and inputs.

Why our own cache: Snakemake's between-workflow cache hashes neither wildcards nor imported modules, so it
would reuse an evaluation after the harness changed. Here a changed harness changes the code version, which
changes every key that depends on it.

Layout under the store root::

    objects/<aa>/<key>            the artifact bytes
    objects/<aa>/<key>.meta.json  {key, sha256 (of the bytes), stage, inputs, params}
    manifest/<readable path>.json {name, key, sha256, stage, inputs}
    events.jsonl                  one line per computed / reused / rejected object (audit trail)

A stored object whose bytes no longer hash to its recorded sha256 is never used: ``fetch`` treats it as
missing (and logs it), ``verify`` reports it and, with ``--repair``, deletes it and the readable names that
point to it so that Snakemake rebuilds them.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.core.hashing import sha256_bytes, sha256_file, store_json
from workflow_scripts.core.io import atomic_write_text, locked_file

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PACKAGE = PACKAGE_DIR.name
# Subpackages that no stage's result depends on: never part of a key.
UNHASHED_SUBPACKAGES = frozenset({"devtools"})


def _imported_modules(path: Path) -> set[str]:
    """Every workflow_scripts module a source file imports, anywhere in it (lazy imports inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def _source_files(module: str) -> list[Path]:
    """The files a module stands for in a code version: a library module stands for its whole subpackage (so a
    helper added beside it can never be left out), a stage or a top-level module for its own file."""
    parts = module.split(".")[1:]
    if parts and parts[0] != "stages" and (PACKAGE_DIR / parts[0]).is_dir():
        if parts[0] in UNHASHED_SUBPACKAGES:
            return []
        return sorted((PACKAGE_DIR / parts[0]).rglob("*.py"))
    base = PACKAGE_DIR.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return [candidate]
    return []  # a name imported from a module (a function, a class), not a module itself


def code_files(module: str) -> list[Path]:
    """Every source file ``module`` depends on inside the package: the transitive closure of its imports, each
    library module widened to its whole subpackage."""
    seen: set[str] = set()
    files: set[Path] = set()
    pending = [module]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for path in _source_files(name):
            if path not in files:
                files.add(path)
                pending.extend(_imported_modules(path))
    return sorted(files)


def code_version(module: str) -> str:
    """sha256 over the source of every file ``module`` (e.g. "workflow_scripts.stages.evaluate") depends on
    inside the package. Computed, never listed by hand: a changed helper always re-keys the stages that use it."""
    files = code_files(module)
    if not files:
        raise ValueError(f"{module} is not a module of {PACKAGE}")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + sha256_file(path).encode() + b"\n")
    return digest.hexdigest()


def source_version() -> str:
    """sha256 over the source of every file of the package that any stage can depend on (devtools/ left out), in
    the same form as ``code_version``: the package's identity where there is no git."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR)
        if relative.parts[0] in UNHASHED_SUBPACKAGES or "__pycache__" in relative.parts:
            continue
        digest.update(relative.as_posix().encode() + b"\0" + sha256_file(path).encode() + b"\n")
    return digest.hexdigest()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(PACKAGE_DIR), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git on this host
    return done.stdout if done.returncode == 0 else None


def package_version() -> str:
    """Which code this is, for a reader of the results: ``git:<commit>`` when the package is unmodified at the
    checkout's commit, ``git:<commit>+source:<sha256>`` when it has local changes (the source hash then tells
    them apart), ``source:<sha256>`` outside a git checkout (a copy of the workflow)."""
    tracked = (_git("ls-files", "--", "__init__.py") or "").strip()  # not merely inside some other repository
    commit = (_git("rev-parse", "--verify", "HEAD") or "").strip() if tracked else ""
    changes = _git("status", "--porcelain", "--untracked-files=all", "--", ".") if commit else None
    if not commit or changes is None:
        return f"source:{source_version()}"
    return f"git:{commit}" if not changes.strip() else f"git:{commit}+source:{source_version()}"


def object_key(stage: str, code: str, params: Mapping[str, Any], inputs: Mapping[str, str]) -> str:
    """The key of an artifact: what determines it, nothing else (no paths, no model names)."""
    return sha256_bytes(
        store_json({"stage": stage, "code": code, "params": dict(params), "inputs": dict(inputs)}).encode()
    )


@dataclass(frozen=True)
class ObjectMeta:
    key: str
    sha256: str
    stage: str
    inputs: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """One verify finding."""

    kind: str  # corrupt_object | missing_object | corrupt_readable | missing_readable | bad_meta
    path: str
    detail: str


class Store:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.manifest = self.root / "manifest"

    # -- paths -------------------------------------------------------------------------------------------
    def object_path(self, key: str) -> Path:
        return self.objects / key[:2] / key

    def meta_path(self, key: str) -> Path:
        return self.objects / key[:2] / f"{key}.meta.json"

    def manifest_path(self, readable: Path) -> Path:
        return self.manifest / f"{_relative_name(readable)}.json"

    # -- audit trail ---------------------------------------------------------------------------------------
    def log_event(self, event: str, key: str, stage: str, name: str = "") -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        line = store_json({"event": event, "key": key, "stage": stage, "name": name, "time": time.time()})
        # O_APPEND writes of one short line are atomic across concurrent jobs.
        fd = os.open(self.root / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    # -- objects -------------------------------------------------------------------------------------------
    def read_meta(self, key: str) -> ObjectMeta | None:
        try:
            return ObjectMeta(**json.loads(self.meta_path(key).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def fetch(self, key: str) -> Path | None:
        """The object's path if it exists and its bytes still hash to the recorded sha256."""
        path = self.object_path(key)
        meta = self.read_meta(key)
        if meta is None or not path.exists():
            return None
        if sha256_file(path) != meta.sha256:
            self.log_event("rejected_corrupt", key, meta.stage)
            return None
        return path

    def put(self, key: str, source: Path, stage: str, inputs: Mapping[str, str], params: Mapping[str, Any]) -> Path:
        """Move ``source`` into the store under ``key`` (atomically) and record its meta."""
        target = self.object_path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        meta = ObjectMeta(key=key, sha256=sha256_file(source), stage=stage, inputs=dict(inputs), params=dict(params))
        os.replace(source, target)
        os.chmod(target, 0o444)  # objects are immutable; a writer must go through put()
        atomic_write_text(self.meta_path(key), json.dumps(asdict(meta), sort_keys=True, indent=1))
        return target

    def key_lock(self, key: str) -> contextlib.AbstractContextManager[None]:
        """Serialises work on one key so that two jobs with the same answer compute it once."""
        return locked_file(self.objects / key[:2] / f"{key}.lock")

    # -- readable names ------------------------------------------------------------------------------------
    def materialize(self, key: str, readable: Path, stage: str, inputs: Mapping[str, str]) -> None:
        """Make ``readable`` resolve to the object (hard link, else copy) and record it in the manifest."""
        source = self.object_path(key)
        readable.parent.mkdir(parents=True, exist_ok=True)
        tmp = readable.with_name(f".{readable.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            tmp.write_bytes(source.read_bytes())
        os.replace(tmp, readable)
        meta = self.read_meta(key)
        entry = {
            "name": _relative_name(readable),
            "key": key,
            "sha256": meta.sha256 if meta else sha256_file(readable),
            "stage": stage,
            "inputs": dict(inputs),
        }
        atomic_write_text(self.manifest_path(readable), json.dumps(entry, sort_keys=True, indent=1))

    def build(
        self,
        outputs: Mapping[str, Path],
        stage: str,
        code: str,
        params: Mapping[str, Any],
        inputs: Mapping[str, str],
        compute: Callable[[dict[str, Path]], None],
        materialize: bool = True,
    ) -> bool:
        """Reuse the objects for (stage, code, params, inputs) or compute them; returns True if computed.

        ``outputs`` maps an output name (e.g. "json", "table") to its readable path; ``compute`` receives the
        same names mapped to temporary paths and writes every one of them. Each output is its own object,
        keyed by the stage key and the output name. ``materialize=False`` only stores the objects (a job that
        computed another job's result along with its own); the readable paths then only give the suffixes.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        stage_key = object_key(stage, code, params, inputs)
        keys = _output_keys(stage_key, outputs)
        with self.key_lock(stage_key):
            if all(self.fetch(key) is not None for key in keys.values()):
                if not materialize:
                    return False
                for name, readable in outputs.items():
                    self.materialize(keys[name], readable, stage, inputs)
                self.log_event("reused", stage_key, stage, ",".join(_relative_name(p) for p in outputs.values()))
                return False
            work_dir = Path(tempfile.mkdtemp(dir=self.root, prefix=".build-"))
            try:
                suffixes = {name: "".join(Path(path).suffixes) for name, path in outputs.items()}
                tmp_paths = {name: work_dir / f"{name}{suffixes[name]}" for name in outputs}
                compute(tmp_paths)
                for name, tmp in tmp_paths.items():
                    if not tmp.exists():
                        raise RuntimeError(f"stage {stage} did not write its output {name!r}")
                    self.put(keys[name], tmp, stage, inputs, params)
            finally:
                shutil.rmtree(work_dir, ignore_errors=True)
            if not materialize:
                self.log_event("computed", stage_key, stage, "(stored only)")
                return True
            for name, readable in outputs.items():
                self.materialize(keys[name], readable, stage, inputs)
            self.log_event("computed", stage_key, stage, ",".join(_relative_name(p) for p in outputs.values()))
            return True

    def holds(self, stage: str, code: str, params: Mapping[str, Any], inputs: Mapping[str, str],
              names: tuple[str, ...] = ("json",)) -> bool:
        """Whether ``build`` would reuse stored objects for these outputs (each present and intact)."""
        keys = _output_keys(object_key(stage, code, params, inputs), names)
        return all(self.fetch(key) is not None for key in keys.values())

    # -- verification --------------------------------------------------------------------------------------
    def verify(self, repair: bool = False) -> list[Problem]:
        """Re-hash every object and every readable name in the manifest; optionally delete what is bad."""
        problems: list[Problem] = []
        bad_keys: set[str] = set()
        for meta_file in sorted(self.objects.glob("*/*.meta.json")):
            key = meta_file.name.removesuffix(".meta.json")
            meta = self.read_meta(key)
            path = self.object_path(key)
            if meta is None:
                problems.append(Problem("bad_meta", str(meta_file), "unreadable meta"))
                bad_keys.add(key)
            elif not path.exists():
                problems.append(Problem("missing_object", str(path), "meta without object"))
                bad_keys.add(key)
            elif (actual := sha256_file(path)) != meta.sha256:
                problems.append(Problem("corrupt_object", str(path), f"sha256 {actual} != recorded {meta.sha256}"))
                bad_keys.add(key)
        bad_readables: list[Path] = []
        for entry_file in sorted(self.manifest.rglob("*.json")):
            entry = json.loads(entry_file.read_text())
            readable = Path(entry["name"])
            if not readable.exists():
                problems.append(Problem("missing_readable", entry["name"], "listed in the manifest, not on disk"))
                continue
            if entry["key"] in bad_keys:
                bad_readables.append(readable)
                continue
            actual = sha256_file(readable)
            if actual != entry["sha256"]:
                problems.append(Problem("corrupt_readable", entry["name"], f"sha256 {actual} != {entry['sha256']}"))
                bad_readables.append(readable)
                bad_keys.add(entry["key"])  # a hard link shares its bytes with the object
        if repair:
            for key in bad_keys:
                for path in (self.object_path(key), self.meta_path(key)):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
            for readable in bad_readables:
                with contextlib.suppress(FileNotFoundError):
                    readable.unlink()
                with contextlib.suppress(FileNotFoundError):
                    self.manifest_path(readable).unlink()  # the next run rebuilds the name and its entry
        return problems


def _output_keys(stage_key: str, names: Iterable[str]) -> dict[str, str]:
    """Each output of a stage run is its own object, keyed by the run's key and the output's name."""
    return {name: sha256_bytes(f"{stage_key}:{name}".encode()) for name in names}


def _relative_name(path: Path) -> str:
    """Readable names are recorded relative to the working directory (the workflow root)."""
    resolved = Path(os.path.abspath(path))
    try:
        return str(resolved.relative_to(Path.cwd()))
    except ValueError:
        return str(resolved)
