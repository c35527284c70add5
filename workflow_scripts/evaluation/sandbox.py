"""Parent side of an evaluation child: spawning and driving it (trust model in ``workflow_scripts.evaluation``).

``ChildProcess`` starts ``python -m workflow_scripts.evaluation.child`` (a fresh interpreter, never a fork) in its
own session, with a scrubbed environment (``HOME``, ``TMPDIR`` and ``TRITON_CACHE_DIR`` inside its working
directory) and the resource limits of ``limits.Limits`` (applied by the child itself, ``apply_rlimits``, before torch
is imported), inside the OS sandbox that ``isolation.sandbox_command`` builds (the levels, the probe that measures
them: ``workflow_scripts.evaluation.isolation``; what an answer's child finds empty: ``confinement``). Files the
parent puts into the working directory after the child started (a baseline's problem) reach it through ``in/``, a
read-only view of the host directory inside the child's tmpfs; an answer comes with the command that loads it.

Commands go to the child's stdin as JSON lines; results come back over the result channel
(``workflow_scripts.evaluation.channel``: every message is the answer's word, validated here). ``kill`` kills the child's whole process group (with a PID namespace,
everything the answer started).
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from workflow_scripts.evaluation import memory_cap
from workflow_scripts.evaluation.channel import ChannelReader, ChildDied, ChildTimeout, Message
from workflow_scripts.evaluation.isolation import (REPO_ROOT, Isolation, SandboxUnavailable, probe_isolation,
                                                  sandbox_command)
from workflow_scripts.evaluation.limits import Limits

CHILD_MODULE = "workflow_scripts.evaluation.child"  # what the child runs (python -m)
INBOX = "in"  # inside the private directory: the read-only view of the host's working directory

_ENV_PASSTHROUGH = (
    "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
    # Keep NVLink multicast off where the host asks for it (NCCL/PyTorch/NVSHMEM).
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
)

# How long a command may take to reach a child that reads its stdin (a line is a few bytes to a few KB; only a child
# that stopped reading makes this side wait): where no deadline is given.
WRITE_TIMEOUT_S = 60.0
# How often ``recv_moving`` reads its deadline again while no message comes.
MOVING_DEADLINE_POLL_S = 0.1

# Descriptors one SCM_RIGHTS message may carry (the kernel's SCM_MAX_FD): the areas a child gets at once.
MAX_AREAS = 253


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _wait_exited(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Until every process has exited, at most ``timeout`` seconds (``exited``); those that have not."""
    end = time.monotonic() + timeout
    alive = procs
    while alive and time.monotonic() < end:
        alive = [p for p in alive if p.is_running() and not exited(p.pid)]  # is_running: not a reused pid
        if alive:
            time.sleep(0.01)
    return alive


def exited(pid: int) -> bool:
    """Whether process ``pid`` has exited: it is gone, or a zombie none of whose threads still runs (its memory, its
    device memory too, and its files are released once the last thread exits; a zombie need not be reaped soon: its
    reaper may be a PID namespace's init already gone, or a container's init that never reaps)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        return all(_task_state(pid, t) in ("Z", "X") for t in tasks)
    except OSError:
        return True


def _task_state(pid: int, tid: str) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"  # gone meanwhile


@dataclass
class ChildProcess:
    """One child: ``start`` it, ``send`` JSON commands on its stdin, ``recv`` its messages."""

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
    bwrap: str | None = None  # a bubblewrap binary (default: $KB_BWRAP, then PATH)
    covers: tuple[Any, ...] = ()  # folders the child finds empty (sandboxed levels; confinement.Cover)
    memory_cap_mode: str = "auto"  # how limits.memory_bytes is enforced on the tree (memory_cap.MODES)
    cap: memory_cap.TreeMemoryCap | None = None  # set by start
    proc: subprocess.Popen | None = None
    reader: ChannelReader | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    sandbox: Isolation | None = None  # what was in force (set by start)
    started_at: float = 0.0
    areas_later: bool = False  # its memory areas (transport.Area) come after start, by deliver_areas
    hello: Message | None = None
    _area_socket: socket.socket | None = None
    _killed: bool = False  # kill() has run: once the child is reaped, its group id may be another process's
    _left: list[psutil.Process] = field(default_factory=list)  # of its tree, what had not exited when kill() returned

    MAX_EVENTS: int = 256  # monitor reports kept (the answer's process sends them; it could send millions)

    @property
    def areas_delivered(self) -> bool:
        """Its memory areas have been handed over (``deliver_areas``), or it takes none."""
        return not self.areas_later or (self.proc is not None and self._area_socket is None)

    @property
    def killed(self) -> bool:
        return self._killed

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
        self.sandbox = probe_isolation(self.isolation, self.limits, self.device, self.bwrap)
        try:
            self.cap = memory_cap.for_child(self.memory_cap_mode, self.limits.memory_bytes)
        except memory_cap.MemoryCapUnavailable as e:
            raise SandboxUnavailable(str(e)) from None
        if self.cap is not None:  # recorded with the isolation: what bounded the tree's host memory
            notes = [memory_cap.WATCH_LIMITS] if self.cap.mode == "watch" else []
            if not self.sandbox.sandboxed and self.cap.mode == "cgroup":
                notes.append("no OS sandbox: the answer's process could move itself out of its memory cgroup")
            self.sandbox = dataclasses.replace(self.sandbox, host_memory=self.cap.mechanism,
                                               warnings=(*self.sandbox.warnings, *notes))
        rfd = wfd = -1
        theirs: socket.socket | None = None
        try:
            rfd, wfd = os.pipe()
            inherited: tuple[int, ...] = (wfd,)
            if self.areas_later:
                self._area_socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                inherited += (theirs.fileno(),)
            prefix = sandbox_command(self.sandbox.tool, self.workdir, self.limits, self.device,
                                     self.sandbox.binary if self.sandbox.tool == "bwrap" else None, self.covers)
            cmd = (self.cap.prefix() if self.cap else []) + prefix + [self.python, "-B", "-s", "-m", CHILD_MODULE]
            with open(self.logdir / f"{self.role}.log", "wb") as out:
                self.proc = subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
                    env=self.env(), pass_fds=inherited, start_new_session=True, close_fds=True,
                )
        except BaseException:
            if rfd >= 0:
                os.close(rfd)
            if self._area_socket is not None:
                self._area_socket.close()
                self._area_socket = None
            if self.cap is not None:
                self.cap.close()  # no cgroup left behind
            raise
        finally:
            if wfd >= 0:
                os.close(wfd)
            if theirs is not None:
                theirs.close()
        if self.cap is not None:
            self.cap.attach(self.proc.pid)
        self.started_at = time.monotonic()
        self.reader = ChannelReader(rfd)
        init = dict(self.init, role=self.role, fd=wfd, device=self.device,
                    limits=self.limits.to_dict(), workdir=str(self.workdir),
                    inbox=INBOX if self.sandbox.sandboxed else ".", user_namespace=self.sandbox.user_namespace)
        if theirs is not None:
            init["area_socket"] = inherited[1]  # pass_fds keeps the number
        self._write_line(init, time.monotonic() + WRITE_TIMEOUT_S)

    def deliver_areas(self, areas: dict[str, dict[str, Any]], child_written_fds: tuple[int, ...] = ()) -> None:
        """Hand the started child its memory areas (``transport.Area.spec``: fd, size, writable), once, over its own
        socket (``SCM_RIGHTS``): a child can be started before the trusted side has built what it will read. Its
        memory cap grows first by what the tree may be charged for (``child_written_fds``: the areas it may touch
        before the trusted side does)."""
        assert self.areas_later and self._area_socket is not None, "deliver_areas: once, to a child started for it"
        fds = [int(a["fd"]) for a in areas.values()]
        if len(fds) > MAX_AREAS:
            raise ValueError(f"{len(fds)} memory areas for one child: one message carries at most {MAX_AREAS}")
        try:
            if self.cap is not None:
                self.cap.add_areas(tuple(fds), child_written_fds)
        except OSError as e:
            raise SandboxUnavailable(f"the memory cap could not be widened for the child's areas: {e}") from None
        payload = {name: dict(a, fd=i) for i, (name, a) in enumerate(areas.items())}
        try:
            socket.send_fds(self._area_socket, [json.dumps(payload).encode()], fds)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child is gone; recv will say so
        finally:
            self._area_socket.close()
            self._area_socket = None

    def private_dir(self) -> Path:
        """The child's private directory as this process can read it: through the sandbox's mount namespace
        (``/proc/<pid>/root``) when sandboxed, else the working directory itself."""
        if self.proc is None or not (self.sandbox and self.sandbox.sandboxed):
            return self.workdir
        pid = self.proc.pid
        if self.sandbox.tool == "unshare":  # the namespaces are those of unshare's child
            try:
                kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                pid = int(kids[0])
            except (OSError, ValueError, IndexError):
                return self.workdir
        return Path(f"/proc/{pid}/root") / str(self.workdir).lstrip("/")

    def _write_line(self, obj: dict[str, Any], deadline: float) -> None:
        """One command line into the child's stdin, written whole by ``deadline`` (else ``ChildTimeout``): a child
        that stops reading its commands (its pipe full) never holds this side in a write."""
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        data = memoryview((json.dumps(obj) + "\n").encode())
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        try:
            os.set_blocking(fd, False)
            while data:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChildTimeout()
                if not poll.poll(int(min(left, 1.0) * 1000) + 1):
                    continue
                try:
                    data = data[os.write(fd, data):]
                except BlockingIOError:
                    continue
        except (BrokenPipeError, OSError, ValueError):
            pass  # the child is gone (or its stdin closed here); recv will say so

    def send(self, cmd: str, deadline: float | None = None, **kw: Any) -> None:
        """The command ``cmd`` with its fields ``kw``, written by ``deadline`` (default: ``WRITE_TIMEOUT_S`` from
        now)."""
        self._write_line(dict(kw, cmd=cmd), time.monotonic() + WRITE_TIMEOUT_S if deadline is None else deadline)

    def recv(self, deadline: float, keep_events: bool = True) -> Message:
        """Next non-event message. Event messages (monitor reports) are collected in ``self.events``. Raises
        ``ChildDied`` once the channel is closed here (``kill``)."""
        if self.reader is None:
            raise ChildDied("result channel closed")
        while True:
            msg = self._frame(deadline)
            if not (keep_events and self._kept_event(msg)):
                return msg

    def recv_moving(self, deadline: Callable[[], float], poll_s: float = MOVING_DEADLINE_POLL_S) -> Message:
        """``recv`` by a deadline read again as it waits: one that moves while the process stands stopped by its
        job's lease (seconds that are not the child's). A frame is read only once one is waiting, so no deadline cuts
        one in half."""
        while True:
            left = deadline() - time.monotonic()
            if left <= 0:
                raise ChildTimeout()
            if self.readable(min(left, poll_s)):
                msg = self._frame(deadline())
                if not self._kept_event(msg):
                    return msg

    def _frame(self, deadline: float) -> Message:
        assert self.reader is not None
        try:
            return self.reader.recv(deadline)
        except ChildDied:
            self.wait(5.0)
            raise

    def _kept_event(self, msg: Message) -> bool:
        """Whether ``msg`` is an event (a monitor's report), collected in ``events``."""
        if msg.type != "event":
            return False
        if len(self.events) < self.MAX_EVENTS:
            self.events.append(msg.header)
        return True

    def readable(self, timeout_s: float) -> bool:
        """Whether a message (or the channel's end) is waiting, within ``timeout_s``; raises ``ChildDied`` once the
        channel is closed here (``kill``)."""
        if self.reader is None:
            raise ChildDied("result channel closed")
        return self.reader.ready(timeout_s)

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
        """Kill the child's whole process tree and reap it: its process group (it is a session leader; inside a
        sandbox this ends its PID namespace) and every process under it, and return only once each has exited
        (``_wait_exited``), so the next answer never starts beside a dying one that still holds its memory (tens of
        GiB of device memory for a multi-GB problem: the sandbox's wrapper is reaped before the process inside has
        released them)."""
        if self.proc is None:
            return
        if self._killed and self.proc.returncode is not None:
            # Killed and reaped: its group id may be a new process's by now, so only what of its tree had not exited
            # (psutil checks each one's identity) is killed and waited for again.
            for p in self._left:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            self._left = _wait_exited(self._left, timeout=30.0)
            return
        self._killed = True
        if self.cap is not None:
            self.cap.stop_watching()  # before the pid can be reaped and reused
        # Only while the child is not reaped: its pid is ours until then, never another process's.
        tree = _descendants(self.proc.pid) if self.proc.returncode is None else []
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in tree:  # those that left the group (setsid) too
            try:
                p.kill()
            except psutil.Error:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self._left = _wait_exited(tree, timeout=30.0)
        if self.cap is not None:
            self.cap.close()  # cgroup: anything left in it is killed, then it is removed
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
        if self._area_socket is not None:
            self._area_socket.close()
            self._area_socket = None

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
        if self.cap is not None and self.cap.exceeded():
            return self.cap.describe()
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
