"""The baselines' compile cache: what ``torch.compile`` builds for a problem's reference (Inductor's generated code,
its precompiled header, Triton's kernels, max-autotune's choices), kept between the compile children of one
environment, so a later problem reuses what no problem depends on (the header, about a minute of g++ on a small CPU
host, Inductor's instruction-set checks and Triton's GPU driver module, each built once) and a re-run or a resumed run
does not compile again.

A compile child starts in a fresh private folder, as every child does: ``seed`` copies the cache into its working
folder before it starts, ``keep`` copies what it added back once it has timed its baseline, file by file and each
whole or not at all (a rename), so jobs side by side never read a half-written file. Only baseline children, which run
the problem's own code (trusted), are seeded; no answer's process ever sees this folder.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

# The parts of a child's private folder that hold compiled artifacts: Inductor's cache (TORCHINDUCTOR_CACHE_DIR) and
# Triton's (TRITON_CACHE_DIR), as sandbox.ChildProcess.env names them, and Inductor's default folder under $TMPDIR
# (``torchinductor_<user>``), where it keeps the precompiled header whatever TORCHINDUCTOR_CACHE_DIR says.
PARTS = (".inductor", ".triton")
DEFAULT_FOLDER_PREFIX = "torchinductor_"
# The parts every problem shares (they do not depend on the problem); the rest is kept per problem, so a child is
# seeded with its own problem's artifacts only (a study's cache holds thousands of files; a child's private folder has
# an inode cap). The precompiled header is one; the other is Inductor's CPU backend's instruction-set checks: in
# every fresh cache it builds tiny programs (their sources define `*_chk_kernel` functions) to learn which vector
# instructions the host's compiler and CPU support, about 6 s of g++ per compile child on the 2-core CPU host (a small
# problem's first compile took 10.4 s seeded with the header alone, 4.8 s with the checks too). Their file names hash
# their sources, so a check another Inductor version builds is another file, never a stale one.
SHARED = "precompiled_headers"
ISA_CHECK_MARK = b"_chk_kernel"
# The checks' sources are a few hundred bytes; the marker is what tells them apart, the cap only keeps a larger
# source that happens to name a `_chk_kernel` with its problem.
ISA_CHECK_MAX_BYTES = 4096
# Triton's driver module for the GPU (``cuda_utils``, ``hip_utils``), which its driver compiles with the host's C
# compiler into a fresh cache, under a hash of its source: the same for every problem, so shared too.
TRITON_DRIVERS = ("cuda_utils", "hip_utils")
PARTIAL = ".partial"  # a file being added to the cache (renamed into place when whole)


def folder_name(environment_key: str, autotune_alone: bool) -> str:
    """The cache's folder for one environment and one way of autotuning: it keeps max-autotune's picks with what it
    built, and picks made in the job's GPU turn beside other jobs' work (``baselines.autotune_alone: false``) are not
    those made with the GPU alone, so neither setting's baselines start from the other's (the alone folder keeps the
    name every cache had before the setting existed)."""
    return f"compile-{environment_key[:16]}" + ("" if autotune_alone else "-autotune-in-turn")


@dataclass(frozen=True)
class CacheUse:
    """What one compile child took from the cache and gave back (recorded with the baseline)."""

    files_seeded: int
    files_kept: int

    def to_dict(self) -> dict[str, int]:
        return {"files_seeded": self.files_seeded, "files_kept": self.files_kept}


def _artifacts(folder: Path) -> list[Path]:
    """The artifacts under a child's folder (or a cache section laid out like one), relative to it; lock files
    (Inductor's and Triton's file locks) are the writer's, not content."""
    if not folder.is_dir():
        return []
    parts = [folder / name for name in PARTS] + sorted(folder.glob(f"{DEFAULT_FOLDER_PREFIX}*"))
    return [p.relative_to(folder) for part in parts if part.is_dir() for p in part.rglob("*")
            if p.is_file() and not p.is_symlink() and p.suffix not in (".lock", PARTIAL) and "locks" not in p.parts]


def _section(cache: Path, problem: str, private: Path, relative: Path) -> Path:
    return cache / ("shared" if _is_shared(private, relative) else f"problems/{problem}")


def _is_shared(private: Path, relative: Path) -> bool:
    """Whether an artifact does not depend on the problem: the precompiled header, Triton's driver module or one of
    Inductor's instruction-set checks."""
    return (SHARED in relative.parts or (relative.parts[0] == ".triton" and relative.name.startswith(TRITON_DRIVERS))
            or _is_isa_check(private, relative))


def _is_isa_check(private: Path, relative: Path) -> bool:
    """Whether a file of Inductor's code cache (``<name>.cpp`` or what it built, ``<name>.so``) is one of its
    instruction-set checks: its source is small and defines a ``*_chk_kernel`` function."""
    source = private / relative.with_suffix(".cpp")
    try:
        return source.stat().st_size <= ISA_CHECK_MAX_BYTES and ISA_CHECK_MARK in source.read_bytes()
    except OSError:
        return False


def seed(cache: Path, problem: str, workdir: Path) -> int:
    """Copy the cache's shared part and problem ``problem``'s (a key of the problem, e.g. its sha256) into a compile
    child's working folder, before it starts; the number of files copied."""
    copied = 0
    for section in (cache / "shared", cache / "problems" / problem):
        for relative in _artifacts(section):
            target = workdir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(section / relative, target)
            copied += 1
    return copied


def keep(cache: Path, problem: str, private: Path) -> int:
    """Copy the files a compile child added (its private folder, read while it runs) into the cache, each whole or not
    at all; a file the cache holds already is left as it is. The number of files added."""
    added = 0
    for relative in _artifacts(private):
        target = _section(cache, problem, private, relative) / relative
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f"{target.name}.{os.getpid()}.{secrets.token_hex(4)}{PARTIAL}")
        try:
            shutil.copyfile(private / relative, staging)
            os.rename(staging, target)
            added += 1
        except OSError:
            staging.unlink(missing_ok=True)  # the child's file went away, or the cache's disk is full: skipped
    return added
