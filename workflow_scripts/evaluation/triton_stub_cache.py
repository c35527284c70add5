"""Triton's driver stubs, built once per host: the small C helpers Triton's CUDA driver compiles with gcc in every
process that starts without them in its cache. The first answer process of a problem builds them before any answer
runs; the trusted side keeps a copy of that cache (its template) and seeds every later answer process with it, and
keeps it for later problems too, in this user's own folder beside the GPU locks.

A template is taken only before an answer is loaded, and only from a folder no other user can write to: a copy
taken after an answer ran, or from a shared folder, could carry planted files into every later process."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import secrets
import shutil
import sys
from pathlib import Path

from workflow_scripts.evaluation.config import RunConfig


def template_home(cfg: RunConfig) -> Path | None:
    """Where the host keeps Triton's cache as an answer process built it before any answer ran (its driver's C
    helpers), for the processes of every later problem: in this user's own folder beside the GPU locks (the lock
    folder may be shared between users; that folder is trusted only while no one else can write to it:
    ``_own_private_dir``), keyed by Triton's and Python's versions. None on the CPU (the interpreter builds nothing)
    or without Triton."""
    if cfg.device != "cuda":
        return None
    try:
        version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None
    key = hashlib.sha256(f"{version}|{sys.version}|{sys.platform}".encode()).hexdigest()[:16]
    return Path(cfg.lock_dir) / f"triton-driver-{os.getuid()}" / key


def _own_private_dir(path: Path, create: bool) -> int | None:
    """A descriptor of the folder ``path`` (made, mode 0700, where missing and ``create``) when it is this user's own
    and no one else may write in it, so nothing in it was planted by another user; None otherwise (another user's
    folder, a shared one, a link). Later paths go through the descriptor: the folder checked is the folder used."""
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        os.close(fd)
        return None
    return fd


def load_template(home: Path, dest: Path) -> bool:
    """Copy the kept template at ``home`` to ``dest`` (this job's own folder); False when there is none, or it is
    not in a folder that only this user can write to."""
    fd = _own_private_dir(home.parent, create=False)
    if fd is None:
        return False
    try:
        shutil.copytree(f"/proc/self/fd/{fd}/{home.name}", dest)
        return True
    except OSError:
        shutil.rmtree(dest, ignore_errors=True)
        return False
    finally:
        os.close(fd)


def publish_template(template: Path, home: Path) -> None:
    """Copy ``template`` to ``home`` unless it is there: whole or not at all (a rename), and a job that loses the race
    to another keeps the other's. Nothing is published where ``home``'s folder is not this user's alone."""
    fd = _own_private_dir(home.parent, create=True)
    if fd is None:
        return
    staging = f"{home.name}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        if not os.path.lexists(f"/proc/self/fd/{fd}/{home.name}"):
            shutil.copytree(template, f"/proc/self/fd/{fd}/{staging}")
            os.rename(staging, home.name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        pass  # another job's copy got there first: each problem keeps the one it finds
    finally:
        shutil.rmtree(f"/proc/self/fd/{fd}/{staging}", ignore_errors=True)
        os.close(fd)
