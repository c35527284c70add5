"""What an answer's process can read: the system's folders, the interpreter, the harness's package and its own
private folder; nothing else (``covers``).

Every other folder where another answer, a reference or a result could lie is covered, before the child starts, by
an empty read-only tmpfs (``isolation.STAGE1``): each top-level folder of ``/`` that is not the system's
(``SYSTEM_FOLDERS``: ``/tmp``, ``/home``, ``/root``, the folder the repository is in, ...), ``/var/tmp``,
``/run/user`` and the folders a caller names (the problem's sources, the configuration's results and store). What
the child needs from under a covered folder (``needed_paths``: the harness's package, the interpreter's
installation and libraries, its own working directory) is bound back read-only into the cover, and nothing beside
it: the evaluator's temporary folders (every answer of a problem, before and while it is judged), the pipeline's
answer files, the other answers' working directories and the suite's reference sources are all out of reach.

The answer itself reaches its process through the command that loads it (``session.AnswerSession._load``), written
by the child into its own private folder: no host file holds it where another child could look.

Baseline children and the helpers that build inputs run the problem's own code (trusted) and see what they need.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.evaluation.isolation import REPO_ROOT

# Top-level folders of / that hold the system (programs, libraries, configuration, devices): left visible. Every
# other top-level folder is covered.
SYSTEM_FOLDERS = frozenset({"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "run",
                            "sbin", "sys", "usr", "var", "snap", "nix"})
# Folders inside the system's where anyone may write: covered too.
SHARED_WRITABLE = ("/var/tmp", "/run/user", "/run/shm", "/var/lib/snakemake")
# Paths one cover can bind back (the sandbox's first stage holds each open on a descriptor of its own while it
# covers their folder); a folder with more is covered entry by entry instead.
MAX_KEPT = 6


@dataclass(frozen=True)
class Cover:
    """A folder the child finds empty but for ``kept``: paths under it bound back read-only, as they are."""

    folder: str
    kept: tuple[str, ...] = ()

    def line(self) -> str:
        """The sandbox's first stage reads one line per cover: the folder, then each kept path, tab-separated."""
        return "\t".join((self.folder, *self.kept))

    def to_dict(self) -> dict[str, Any]:
        return {"folder": self.folder, "kept": list(self.kept)}


def needed_paths(workdir: Path, package: str = "workflow_scripts") -> list[Path]:
    """What a child cannot run without: the harness's package and the one its module is in, its own folder, the
    interpreter's installation (as named and as resolved), its module folders (not the repository or the working
    folder, which this process's ``sys.path`` may hold, nor this process's own PYTHONPATH) and the libraries the
    environment points the loader to."""
    paths = [REPO_ROOT / "workflow_scripts", REPO_ROOT / package, Path(workdir)]
    prefixes = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    for prefix in prefixes:
        paths += [prefix, prefix.resolve()]
    paths += [Path(sys.executable).resolve().parent]
    paths += [Path(p) for p in sysconfig.get_paths().values()]
    own = (REPO_ROOT, Path.cwd())
    # This process's PYTHONPATH is not the child's (sandbox.ChildProcess.env gives it the repository alone): an entry
    # of it is no module folder of the child's, and may be anything (s21: another checkout of this repository, its
    # results and tests whole, was open to every answer of a run started with PYTHONPATH pointing there).
    ours_only = {Path(p).absolute() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    for entry in (Path(p).absolute() for p in sys.path if p and os.path.isdir(p)):
        inside_own = any(entry == o or o in entry.parents for o in own)
        in_prefix = any(pre in entry.parents for pre in prefixes)
        if (not inside_own or in_prefix) and (entry not in ours_only or in_prefix):
            paths.append(entry)
    for variable in ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH"):
        paths += [Path(p) for p in os.environ.get(variable, "").split(os.pathsep) if p]
    out = []
    for p in paths:
        try:
            out.append(p.resolve() if p.is_symlink() else p.absolute())
        except OSError:
            continue
    return _outermost([p for p in out if p.exists()])


def problem_sources(problem: Path) -> list[Path]:
    """Where a problem's source (and its siblings', and their prompts') lies: the suite checkout when the problem
    sits in KernelBench's layout (``<suite>/KernelBench/level<N>/<id>_<name>.py``), else the problem's own folder.
    An answer that found its problem's file could rebuild the reference model under the same seed and return its
    outputs: one file would pass every problem."""
    folder = Path(problem).resolve().parent
    if folder.name.startswith("level") and folder.name[5:].isdigit() and folder.parent.name == "KernelBench":
        return [folder.parent.parent, folder]
    return [folder]


def covers(workdir: Path, extra: list[Path] | None = None, package: str = "workflow_scripts") -> tuple[Cover, ...]:
    """The covers that leave an answer's process (its module in ``package``) only what it needs
    (``needed_paths``): every folder of ``candidate_folders`` and of ``extra``, outermost first, each with the
    needed paths under it kept."""
    needed = needed_paths(workdir, package)
    extra = extra or []
    folders = _outermost([f for f in candidate_folders() + [Path(p) for p in extra] if _exists(f)])
    out: list[Cover] = []
    for folder in folders:
        out += _cover(folder, needed)
    return tuple(out)


def candidate_folders() -> list[Path]:
    """Every top-level folder of / but the system's, the writable folders inside the system's, and the places this
    process writes its own temporary files and reads the repository from (which may lie inside the system's)."""
    import tempfile

    top = [Path("/") / name for name in sorted(os.listdir("/")) if name not in SYSTEM_FOLDERS]
    own = [Path(tempfile.gettempdir()), Path.home(), REPO_ROOT, Path.cwd()]
    own += [Path(os.environ[v]) for v in ("TMPDIR", "TMP", "TEMP") if os.environ.get(v)]
    return [p for p in top if p.is_dir() and not p.is_symlink()] + [Path(p) for p in SHARED_WRITABLE] + own


def hidden_by(record: list[dict[str, Any]], path: Path | str) -> bool:
    """Whether ``path`` was out of the answer's reach under the covers a result records
    (``protocol.hidden_from_answer``)."""
    p = Path(path).resolve()
    for cover in record:
        folder = Path(cover["folder"])
        if p == folder or folder in p.parents:
            return not any(p == Path(k) or Path(k) in p.parents for k in cover["kept"])
    return False


def _cover(folder: Path, needed: list[Path]) -> list[Cover]:
    if any(folder == n or n in folder.parents for n in needed):
        return []  # the folder is needed whole
    kept = [n for n in needed if folder in n.parents]
    if len(kept) <= MAX_KEPT:
        return [Cover(str(folder), tuple(str(k) for k in kept))]
    entries = sorted(e for e in folder.iterdir() if not e.is_symlink())
    return [c for entry in entries for c in _cover(entry, needed)]


def _outermost(paths: list[Path]) -> list[Path]:
    """``paths`` without duplicates and without those inside another of them, in order."""
    unique = list(dict.fromkeys(paths))
    return [p for p in unique if not any(q != p and q in p.parents for q in unique)]


def _exists(path: Path) -> bool:
    try:
        return path.exists() and not path.is_symlink() and path != Path("/")
    except OSError:
        return False
