"""Content-addressed artifact store.

Every artifact the pipeline produces is stored once under the sha256 of what determines it (the stage name,
the stage's code version, its parameters and the content hashes of its inputs; timings add the environment
fingerprint). Readable names under ``results/`` are copies of those objects (reflinks where the file system has
them): never the object's own inode, so editing a result file cannot change what the store holds. A manifest entry
per readable name records name, key, content sha256, stage and inputs.

Stages read the results of earlier stages through ``Store.check_result``: a result file whose bytes no longer hash
to its manifest entry is refused (``ChangedResult``, naming the file), never folded into later numbers.
Refused rather than silently re-derived from the object: the file is what a reviewer opens, and it must agree with
the published numbers; which of the two is wrong (an edit, a bad disk) is for a person to decide.

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
point to it so that Snakemake rebuilds them. ``forget`` drops chosen objects and the result files made from them,
so that the next run recomputes exactly those (a forced Snakemake rerun alone would find them stored).
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
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

from workflow_scripts.core.hashing import HASH_CHUNK, sha256_bytes, sha256_file, store_json
from workflow_scripts.core.io import atomic_write_text, locked_file

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PACKAGE = PACKAGE_DIR.name
# Subpackages that no stage's result depends on: never part of a key.
UNHASHED_SUBPACKAGES = frozenset({"devtools"})
# The file in the package's __pycache__ where code versions keep each source file's imports by its content
# (_ImportsCache), beside Python's bytecode.
IMPORTS_CACHE_NAME = "code_imports.json"
# ioctl_ficlone(2): a copy-on-write clone of a whole file (Btrfs, XFS, ...); fcntl has the name from Python 3.12.
FICLONE = getattr(fcntl, "FICLONE", 0x40049409)


# Calls that import a module named by a value: the key builder cannot follow them (see _refuse_string_import).
IMPORT_CALLS = frozenset({"import_module", "__import__"})


class StringImport(ValueError):
    """A package module imported by name at run time (``importlib.import_module("workflow_scripts...")``): the code
    version could not follow it, so a change to that module would leave stored results in place."""


def _refuse_string_import(node: ast.Call, path: Path) -> None:
    """Fail loudly on ``import_module``/``__import__`` of the package, or of a name the source does not spell out;
    a literal third-party name (``import_module("triton")``) is no part of the package and passes."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    if name not in IMPORT_CALLS:
        return
    target = node.args[0] if node.args else None
    if isinstance(target, ast.Constant) and isinstance(target.value, str) and target.value.split(".")[0] != PACKAGE:
        return
    raise StringImport(
        f"{path}:{node.lineno}: {name}({ast.unparse(target) if target is not None else ''}) imports a module by "
        f"name, which the store's code version cannot follow; import it with an import statement"
    )


def _imported_modules(source: bytes, path: Path) -> set[str]:
    """Every workflow_scripts module a source file imports, anywhere in it (lazy imports inside functions too). An
    import by name at run time is refused (``StringImport``): every import that can decide a result is followed."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
        elif isinstance(node, ast.Call):
            _refuse_string_import(node, path)
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


class _ImportsCache:
    """Each source file's package imports (``_imported_modules``) under the sha256 of its bytes, in the package's
    ``__pycache__/<IMPORTS_CACHE_NAME>``: parsing the sources is most of a code version (a quarter of a second for
    an evaluate job's 72 files on the 2-core development machine), which every stage job takes, most of them (a
    study's store-reuse jobs) for little else. Keyed by content, an entry never outlives its source; a cache that
    cannot be read or written (a read-only install) only costs the parse."""

    def __init__(self) -> None:
        self.path = PACKAGE_DIR / "__pycache__" / IMPORTS_CACHE_NAME
        try:
            self.entries: dict[str, list[str]] = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.entries = {}
        self.changed = False

    def imports(self, path: Path) -> list[str]:
        source = path.read_bytes()
        digest = sha256_bytes(source)
        if digest not in self.entries:
            self.entries[digest] = sorted(_imported_modules(source, path))  # raises StringImport: never cached
            self.changed = True
        return self.entries[digest]

    def save(self) -> None:
        if self.changed:
            with contextlib.suppress(OSError):
                self.path.parent.mkdir(exist_ok=True)
                atomic_write_text(self.path, json.dumps(self.entries, sort_keys=True))


def code_files(module: str) -> list[Path]:
    """Every source file ``module`` depends on inside the package: the transitive closure of its imports, each
    library module widened to its whole subpackage."""
    seen: set[str] = set()
    files: set[Path] = set()
    pending = [module]
    cache = _ImportsCache()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for path in _source_files(name):
            if path not in files:
                files.add(path)
                pending.extend(cache.imports(path))
    cache.save()
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

    kind: str  # corrupt_object | missing_object | corrupt_readable | missing_readable | linked_readable | bad_meta
    path: str
    detail: str


class ChangedResult(SystemExit):
    """A result file that no longer holds what the store wrote there, or that the store never wrote.

    A SystemExit: the stage reading it stops with this message alone (no traceback), and its job fails."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"error: {message}")
        self.path = str(path)
        self.message = message


@dataclass(frozen=True)
class Forgotten:
    """What ``Store.forget`` dropped: the object keys, the result files made from them, and the results made from
    those (files deleted; the latter's objects are kept: the next run reuses them where its inputs are unchanged)."""

    keys: list[str]
    names: list[str]
    downstream: list[str]


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

    def key_lock(self, key: str) -> contextlib.AbstractContextManager[bool]:
        """Serialises work on one key so that two jobs with the same answer compute it once."""
        return locked_file(self.objects / key[:2] / f"{key}.lock")

    # -- readable names ------------------------------------------------------------------------------------
    def materialize(self, key: str, readable: Path, stage: str, inputs: Mapping[str, str]) -> None:
        """Write ``readable`` as a copy of the object (its own inode) and record it in the manifest."""
        source = self.object_path(key)
        readable.parent.mkdir(parents=True, exist_ok=True)
        tmp = readable.with_name(f".{readable.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        _copy_file(source, tmp)
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

    def manifest_entry(self, readable: Path | str) -> dict[str, Any] | None:
        try:
            return json.loads(self.manifest_path(Path(readable)).read_text())
        except FileNotFoundError:
            return None

    def check_result(self, readable: Path | str, required: bool = True) -> str:
        """The sha256 of a result file an earlier stage wrote through the store, after checking it against the
        file's manifest entry: a file edited since (or never written by the store, when ``required``) is refused
        with ``ChangedResult`` naming it. Stages read earlier results through this, never around it."""
        readable = Path(readable)
        actual = sha256_file(readable)
        entry = self.manifest_entry(readable)
        name = _relative_name(readable)
        if entry is None:
            if not required:
                return actual
            raise ChangedResult(readable, (
                f"{name} is not a result this store wrote (no entry {self.manifest_path(readable)}): it cannot be "
                f"trusted as an input. Delete it and rerun (the store rebuilds it, reusing what it holds)."))
        if actual != entry["sha256"]:
            self.log_event("refused_changed", entry["key"], entry["stage"], name)
            raise ChangedResult(readable, (
                f"{name} was changed after the store wrote it (its sha256 is {actual[:12]}..., the store recorded "
                f"{entry['sha256'][:12]}... under key {entry['key'][:12]}...): a changed result file is never used. "
                f"Restore it from the store with `snakemake --cores 1 repair_store`, then rerun; to compute it "
                f"anew instead: `python -m workflow_scripts forget {name}`, then rerun."))
        return actual

    def forget(self, paths: Iterable[Path | str], dry_run: bool = False) -> Forgotten:
        """Drop the objects behind these result files (files, or folders of them) so that the next run recomputes
        them: deletes every result file made from those objects (another model's identical answer, too) and the
        results made from those in turn (rows, summary), each with its manifest entry. Raises ValueError naming a
        path that holds no result of this store."""
        entries = self._manifest_entries()
        keys: set[str] = set()
        for path in paths:
            name = _relative_name(Path(path))
            chosen = [e for e in entries if e["name"] == name or e["name"].startswith(name.rstrip("/") + "/")]
            if not chosen:
                raise ValueError(f"{name}: no result of the store {self.root} is recorded there")
            keys.update(e["key"] for e in chosen)
        return self._drop(keys, entries, "forgotten", dry_run)

    def _drop(self, keys: set[str], entries: list[dict[str, Any]], event: str, dry_run: bool = False) -> Forgotten:
        """Delete the objects ``keys``, the result files made from them and, transitively, the results whose
        recorded inputs include one of those files' content: Snakemake reruns a job whose output is missing only
        when a result downstream of it is missing too. The downstream objects stay (reused where nothing changed)."""
        dropped = [e for e in entries if e["key"] in keys]
        removed = {e["name"] for e in dropped}
        downstream: list[dict[str, Any]] = []
        hashes = {e["sha256"] for e in dropped}
        while hashes:
            found = [e for e in entries if e["name"] not in removed and hashes & set(e["inputs"].values())]
            removed.update(e["name"] for e in found)
            downstream += found
            hashes = {e["sha256"] for e in found}
        if not dry_run:
            for entry in dropped + downstream:
                for path in (Path(entry["name"]), self.manifest_path(Path(entry["name"]))):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
            for key in sorted(keys):
                meta = self.read_meta(key)
                for path in (self.object_path(key), self.meta_path(key)):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                self.log_event(event, key, meta.stage if meta else "",
                               ",".join(e["name"] for e in dropped if e["key"] == key))
        return Forgotten(sorted(keys), sorted(e["name"] for e in dropped), sorted(e["name"] for e in downstream))

    def _manifest_entries(self) -> list[dict[str, Any]]:
        return [json.loads(path.read_text()) for path in sorted(self.manifest.rglob("*.json"))]

    # -- verification --------------------------------------------------------------------------------------
    def verify(self, repair: bool = False) -> list[Problem]:
        """Re-hash every object and every readable name in the manifest. With ``repair``: a result file that was
        edited, or is a hard link, is rewritten as a copy of its intact object; the entry of a deleted one is
        removed; a bad object is rewritten from an intact copy under a readable name; an object that cannot be
        restored is dropped with the results made from it (``_drop``), so that the next run recomputes it."""
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
        entries = self._manifest_entries()
        to_rewrite: list[dict[str, Any]] = []  # result files to rewrite from their object
        stale: list[dict[str, Any]] = []  # entries of files deleted since (e.g. a removed model's results)
        intact: dict[str, Path] = {}  # a bad object's key -> a result file that still holds its bytes
        for entry in entries:
            readable = Path(entry["name"])
            if not readable.exists():
                problems.append(Problem("missing_readable", entry["name"], "listed in the manifest, not on disk"))
                stale.append(entry)
                continue
            actual = sha256_file(readable)
            if actual != entry["sha256"]:
                problems.append(Problem("corrupt_readable", entry["name"], f"sha256 {actual} != {entry['sha256']}"))
                to_rewrite.append(entry)  # a copy: its object is checked above, on its own
            elif _same_file(readable, self.object_path(entry["key"])):
                # Written by an older version, which linked names to objects: an edit would change the object.
                problems.append(Problem("linked_readable", entry["name"], "a hard link to its object, not a copy"))
                to_rewrite.append(entry)
            else:
                intact.setdefault(entry["key"], readable)
        if repair:
            for entry in stale:  # the entry goes, the object stays (a later run that needs the file reuses it)
                with contextlib.suppress(FileNotFoundError):
                    self.manifest_path(Path(entry["name"])).unlink()
            lost = set()
            for key in sorted(bad_keys):
                meta = self.read_meta(key)
                if meta is not None and key in intact and sha256_file(intact[key]) == meta.sha256:
                    self._restore_object(key, intact[key])
                else:
                    lost.add(key)
            for entry in to_rewrite:
                if entry["key"] not in lost and self.fetch(entry["key"]) is None:
                    lost.add(entry["key"])  # no object left at all (neither bytes nor meta) to rewrite it from
                if entry["key"] not in lost:
                    self.materialize(entry["key"], Path(entry["name"]), entry["stage"], entry["inputs"])
            if lost:
                self._drop(lost, self._manifest_entries(), "dropped_corrupt")
        return problems

    def _restore_object(self, key: str, copy: Path) -> None:
        target = self.object_path(key)
        tmp = target.with_name(f".{key}.{os.getpid()}.tmp")
        _copy_file(copy, tmp)
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)
        meta = self.read_meta(key)
        self.log_event("restored", key, meta.stage if meta else "", _relative_name(copy))


def _copy_file(source: Path, target: Path) -> None:
    """``target`` as a file of its own with ``source``'s bytes: a reflink (copy-on-write, no extra space) where the
    file system has them, else a plain copy. Never a hard link: the object's inode stays the store's alone."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return
        except OSError:  # no reflinks here (ext4, tmpfs, overlayfs, another file system, not Linux)
            pass
        shutil.copyfileobj(src, dst, HASH_CHUNK)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


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
