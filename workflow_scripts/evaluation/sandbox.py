"""Parent side of an evaluation child: spawning, confining and driving it (trust model in
``workflow_scripts.evaluation.child``).

``ChildProcess`` starts ``python -m workflow_scripts.evaluation.child`` (a fresh interpreter, never a fork) in its
own session and temporary working directory, with a scrubbed environment (``HOME``, ``TMPDIR`` and
``TRITON_CACHE_DIR`` inside that directory), in new user and network namespaces where ``unshare -rn`` works, and
with the resource limits of ``Limits`` (applied by the child itself, ``apply_rlimits``, before torch is imported).
Commands go to the child's stdin as JSON lines; results come back over the authenticated channel
(``workflow_scripts.evaluation.channel``). ``kill`` kills the child's whole process group.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.evaluation.channel import ChannelReader, ChildDied, Message

REPO_ROOT = Path(__file__).resolve().parents[2]  # on the child's PYTHONPATH
CHILD_MODULE = "workflow_scripts.evaluation.child"  # what the child runs (python -m)

_ENV_PASSTHROUGH = (
    "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
    # Keep NVLink multicast off where the host asks for it (NCCL/PyTorch/NVSHMEM).
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
)

_ISOLATION_CACHE: dict[str, list[str]] = {}


def isolation_prefix(mode: str = "auto") -> list[str]:
    """Command prefix that puts the child in new user+network namespaces (``unshare -rn``), or [] where that is
    unavailable or ``mode == "none"``. Probed once per process."""
    if mode == "none":
        return []
    if mode not in _ISOLATION_CACHE:
        exe = shutil.which("unshare")
        prefix: list[str] = []
        if exe:
            try:
                if subprocess.run([exe, "-rn", "--", "true"], capture_output=True, timeout=20).returncode == 0:
                    prefix = [exe, "-rn", "--"]
            except (OSError, subprocess.SubprocessError):
                pass
        _ISOLATION_CACHE[mode] = prefix
    return list(_ISOLATION_CACHE[mode])


@dataclass
class Limits:
    nofile: int = 4096
    fsize_bytes: int = 1 << 30  # any one file (logs included); the answer's prints cannot fill the disk
    as_bytes: int | None = None  # CPU only: CUDA reserves huge virtual ranges

    def to_dict(self) -> dict[str, Any]:
        return {"nofile": self.nofile, "fsize_bytes": self.fsize_bytes, "as_bytes": self.as_bytes}


def apply_rlimits(limits: dict[str, Any]) -> None:
    """Child side, first thing in ``child.main``, before torch is imported: ``Limits.to_dict()``'s limits."""
    import resource

    def setl(which: int, value: int) -> None:
        try:
            resource.setrlimit(which, (value, value))  # soft = hard: the answer cannot raise it again
        except (ValueError, OSError):
            pass

    setl(resource.RLIMIT_CORE, 0)
    if limits.get("nofile"):
        setl(resource.RLIMIT_NOFILE, int(limits["nofile"]))
    if limits.get("fsize_bytes"):
        setl(resource.RLIMIT_FSIZE, int(limits["fsize_bytes"]))
    if limits.get("as_bytes"):
        setl(resource.RLIMIT_AS, int(limits["as_bytes"]))


@dataclass
class ChildProcess:
    """One child: ``start`` it, ``send`` JSON commands on its stdin, ``recv`` authenticated messages."""

    role: str
    workdir: Path
    logdir: Path
    device: str
    init: dict[str, Any]
    gpu: str | None = None
    isolation: str = "auto"
    limits: Limits = field(default_factory=Limits)
    extra_env: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable
    proc: subprocess.Popen | None = None
    reader: ChannelReader | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    network_isolation: bool = False
    started_at: float = 0.0
    fds: tuple[int, ...] = ()  # memory areas the child inherits (transport.Area)
    hello: Message | None = None

    def env(self) -> dict[str, str]:
        wd = str(self.workdir)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": wd,
            "TMPDIR": wd,
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "LANG": "C.UTF-8",
            "TRITON_CACHE_DIR": os.path.join(wd, ".triton"),
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(wd, ".inductor"),
        }
        for k in _ENV_PASSTHROUGH:
            if k in os.environ:
                env[k] = os.environ[k]
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            env["CUDA_VISIBLE_DEVICES"] = "" if self.gpu is None else str(self.gpu)
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logdir.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        rfd, wfd = os.pipe()
        prefix = isolation_prefix(self.isolation)
        self.network_isolation = bool(prefix)
        cmd = prefix + [self.python, "-B", "-s", "-m", CHILD_MODULE]
        out = open(self.logdir / f"{self.role}.log", "wb")
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir, env=self.env(),
                pass_fds=(wfd, *self.fds), start_new_session=True, close_fds=True,
            )
        except BaseException:
            os.close(rfd)
            raise
        finally:
            out.close()
            os.close(wfd)
        self.started_at = time.monotonic()
        self.reader = ChannelReader(rfd, key)
        init = dict(self.init, role=self.role, nonce=key.hex(), fd=wfd, device=self.device,
                    limits=self.limits.to_dict(), workdir=str(self.workdir))
        self._write_line(init)

    def _write_line(self, obj: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the child is gone; recv will say so

    def send(self, cmd: str, **kw: Any) -> None:
        self._write_line(dict(kw, cmd=cmd))

    def recv(self, deadline: float, keep_events: bool = True) -> Message:
        """Next non-event message. Event messages (monitor reports) are collected in ``self.events``."""
        assert self.reader is not None
        while True:
            try:
                msg = self.reader.recv(deadline)
            except ChildDied:
                self.wait(5.0)
                raise
            if msg.type == "event" and keep_events:
                self.events.append(msg.header)
                continue
            return msg

    def await_hello(self, deadline: float) -> Message:
        """The child's first message (it is ready: interpreter, torch, CUDA and Triton loaded), kept: a child
        started ahead of its answer is awaited before the GPU is taken for timing, and used later."""
        if self.hello is None:
            self.hello = self.recv(deadline)
        return self.hello

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """Kill the child's whole process group (it is a session leader) and reap it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.reader is not None:
            try:
                os.close(self.reader.fd)
            except OSError:
                pass
            self.reader = None

    def log_tail(self, n: int = 3000) -> str:
        p = self.logdir / f"{self.role}.log"
        try:
            with open(p, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def death_reason(self) -> str:
        rc = self.returncode
        if rc is None:
            return "no result"
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = str(-rc)
            return f"killed by signal {name}"
        return f"exited with code {rc} before finishing"
