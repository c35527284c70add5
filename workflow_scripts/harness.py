"""Isolation layer and evaluation child.

The parent side (``ChildProcess``, used by ``workflow_scripts.evaluate`` and ``workflow_scripts.baselines``)
spawns ``python -m workflow_scripts.harness`` — a fresh interpreter, never a fork — and the child side
(``main``) runs one of three roles: ``reference`` (the problem's ``Model`` only), ``answer`` (the untrusted
``ModelNew``) or ``baseline`` (eager / ``torch.compile`` timing of ``Model``).

Trust model
===========

The answer is untrusted Python running with the child's full privileges. Anything inside the answer's process can
be read or rewritten by it: the harness's variables, the nonce, ``torch`` itself, the bytes the process sends.
So the design never asks the answer's process for a verdict; it asks it only for raw data and makes that data
useless to forge:

* **Reference outputs are computed in another process** (role ``reference``), which never imports the answer,
  and they travel to the parent over that process's private pipe, never through the file system. The two
  children run side by side in lockstep (trial k in both, then the parent compares), and the reference child is
  gone before the answer is timed. Nothing of the reference exists in the answer's process: reading "the
  expected output" (``gc.get_objects``, frame walking, ``torch.empty`` returning the reference's freed memory)
  finds nothing, and mutating inputs or the reference model's parameters cannot change the reference.
* **The parent computes every verdict** (shape, dtype, ``torch.allclose(ref, out, atol, rtol)``, NaN, statistics)
  from the raw output bytes the answer's process sent and the reference bytes. The answer's process can send any
  bytes it likes; to be judged correct those bytes must equal the reference's on every trial, including
  **hidden trials whose input seed the parent draws at random per run** (recorded for replay) and sends only after
  the answer is loaded, so no output can be precomputed. Timing runs on inputs from another secret seed, and
  after timing those same input tensors are overwritten in place with inputs from a third secret seed and the
  answer must produce their outputs (``post_timing_mismatch``), so caches keyed on tensor identity, address or
  shape are caught. Each timed output is scrubbed (NaN) after the call, outside the timed region, so handing
  back old memory yields NaN.
* **What the answer can still influence** (and what guards it): the timing numbers and the Triton launch count
  it reports are measured inside its process. The harness captures the timer and checker functions before the
  answer is imported and calls only the captured references; after loading, after every call and at the end it
  checks that torch/time/triton globals, the TF32 flags, its own module globals and the launch hooks are the
  same objects as before (``harness_tampered:<name>``). A launch is counted only when the hook is called from
  Triton's own launcher code. An answer that rewrites the harness's captured state in memory could still forge
  timings or launch counts; it cannot make wrong outputs pass. Speedups above 10x are flagged at summary level.
* **Run-time monitors** in the answer's process (a ``sys.addaudithook`` hook, which Python code cannot remove):
  writes outside the child's temporary directory, spawning processes (except Triton's own compiler calls),
  sockets, ``gc`` object enumeration, frame access from answer code, ``sys.settrace``/``setprofile``,
  ``ctypes`` from answer code, signals sent by answer code and ``/proc/<other pid>`` access are blocked and
  reported to the parent at once, before the answer can interfere. Reads are not restricted (nothing secret is
  on disk). Changing ``cudnn.benchmark``/``deterministic`` is only reported (``global_state_changed:*``). Inputs are cloned before each call and compared bitwise afterwards
  (``inputs_mutated``); outputs must be exactly ``torch.Tensor`` (not a subclass:
  ``output_not_plain_tensor``), on the right device, not sharing storage with an input
  (``output_aliases_input``); on CUDA the output is snapshotted on the current stream right after the call
  returns and compared with its value after a device-wide synchronize (``unsynchronized_stream``).
* **Process isolation**: each child is a fresh interpreter in its own session (``start_new_session``) and its
  own temporary working directory; ``HOME``, ``TMPDIR`` and ``TRITON_CACHE_DIR`` point inside it; the
  environment is scrubbed; ``RLIMIT_CORE=0``, ``RLIMIT_NOFILE``, ``RLIMIT_FSIZE`` (and ``RLIMIT_AS`` on CPU) are
  set before torch is imported; where ``unshare -rn`` works the child runs in new user and network namespaces
  (no network; ``network_isolation`` is recorded). A timeout kills the whole process group. A child that dies or
  exits early (``os._exit``, ``sys.exit``) never produces the final authenticated ``done`` message, which the
  parent requires, so it is a crash, never a pass; an exception after which even ``torch.cuda.synchronize()``
  fails (a sticky CUDA error) is reported as ``cuda_error`` and is a crash too. Every answer gets a fresh process,
  so no CUDA error outlives it.
* **Result channel**: the parent passes a random nonce on stdin (never argv/env) and a pipe fd; every message
  header carries an HMAC-SHA256 over (sequence number, header) keyed by the nonce. A message with a bad MAC,
  bad framing or inconsistent sizes is treated as forged (``result_channel_forged``). Writes to stdout/stderr
  are logs only, never results.

Limits (documented, not solved): an answer can compute the right function with PyTorch instead of Triton while
also launching a token Triton kernel; ``keeps_torch_op`` (static analysis) reports that. In-process monitors can
be evaded by code that rewrites interpreter state (they are evidence, not a sandbox), and a GPU kernel can address
any memory of its own process; what such code can corrupt is in-process (launch counts, timings, input
snapshots), never the reference or the verdict. The child runs as the same user as the parent, so outside a user
namespace it could, in principle, read the parent's memory or files.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HARNESS_VERSION = "1"
MAGIC = b"KBH1"
_MAX_HEADER = 1 << 20
REPO_ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------------------------
# Framing (both sides)
# ---------------------------------------------------------------------------------------------------------------


def _mac(key: bytes, seq: int, header: bytes) -> bytes:
    return hmac.new(key, seq.to_bytes(8, "big") + header, hashlib.sha256).digest()


class ProtocolError(Exception):
    """Bad framing or authentication on the result channel: treated as forged."""


class ChildDied(Exception):
    pass


class ChildTimeout(Exception):
    pass


@dataclass
class Message:
    header: dict[str, Any]
    payload: bytearray | None = None

    @property
    def type(self) -> str:
        return str(self.header.get("type"))


class ChannelReader:
    """Parent end of the result pipe: reads authenticated frames with a deadline."""

    def __init__(self, fd: int, key: bytes, max_payload: int) -> None:
        self.fd = fd
        self.key = key
        self.seq = 0
        self.max_payload = max_payload
        self.bytes_read = 0
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def _read_exact(self, n: int, deadline: float, into: memoryview | None = None) -> bytes | None:
        buf = into if into is not None else memoryview(bytearray(n))
        got = 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildTimeout()
            if not self._poll.poll(int(min(left, 1.0) * 1000) + 1):
                continue
            k = os.readv(self.fd, [buf[got:n]])
            if k == 0:
                raise ChildDied("result channel closed")
            got += k
        self.bytes_read += n
        return None if into is not None else bytes(buf)

    def recv(self, deadline: float) -> Message:
        pre = self._read_exact(8, deadline)
        assert pre is not None
        if pre[:4] != MAGIC:
            raise ProtocolError("bad frame magic")
        hlen = int.from_bytes(pre[4:8], "big")
        if hlen > _MAX_HEADER:
            raise ProtocolError("oversized header")
        hb = self._read_exact(hlen, deadline)
        mac = self._read_exact(32, deadline)
        assert hb is not None and mac is not None
        if not hmac.compare_digest(mac, _mac(self.key, self.seq, hb)):
            raise ProtocolError("bad message authentication code")
        self.seq += 1
        try:
            header = json.loads(hb)
        except ValueError as e:
            raise ProtocolError(f"bad header: {e}") from None
        if not isinstance(header, dict):
            raise ProtocolError("header is not an object")
        n = header.get("nbytes", 0)
        if not isinstance(n, int) or n < 0 or n > self.max_payload:
            raise ProtocolError(f"bad payload size {n!r}")
        payload = None
        if n:
            payload = bytearray(n)
            self._read_exact(n, deadline, memoryview(payload))
        return Message(header, payload)


class Sender:
    """Child end of the result pipe. Built before any answer code runs; keeps its own references."""

    def __init__(self, fd: int, key: bytes) -> None:
        import threading

        self._fd = fd
        self._key = key
        self._seq = 0
        self._write = os.write
        self._dumps = json.dumps
        self._mac = _mac
        self._lock = threading.Lock()

    def send(self, header: dict[str, Any], payload: list[memoryview] | None = None) -> None:
        chunks = payload or []
        header = dict(header, nbytes=sum(c.nbytes for c in chunks))
        hb = self._dumps(header, separators=(",", ":"), default=str).encode()
        with self._lock:
            frame = MAGIC + len(hb).to_bytes(4, "big") + hb + self._mac(self._key, self._seq, hb)
            self._seq += 1
            self._write_all(memoryview(frame))
            for c in chunks:
                self._write_all(c.cast("B") if c.ndim != 1 or c.format != "B" else c)

    def _write_all(self, mv: memoryview) -> None:
        off = 0
        n = mv.nbytes
        while off < n:
            off += self._write(self._fd, mv[off: off + (1 << 22)])


# ---------------------------------------------------------------------------------------------------------------
# Parent side: spawning and driving a child
# ---------------------------------------------------------------------------------------------------------------

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
    max_payload: int = 1 << 40
    extra_env: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable
    proc: subprocess.Popen | None = None
    reader: ChannelReader | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    network_isolation: bool = False
    started_at: float = 0.0

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
        cmd = prefix + [self.python, "-B", "-s", "-m", "workflow_scripts.harness"]
        out = open(self.logdir / f"{self.role}.log", "wb")
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir, env=self.env(),
                pass_fds=(wfd,), start_new_session=True, close_fds=True,
            )
        except BaseException:
            os.close(rfd)
            raise
        finally:
            out.close()
            os.close(wfd)
        self.started_at = time.monotonic()
        self.reader = ChannelReader(rfd, key, self.max_payload)
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


# ---------------------------------------------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------------------------------------------

# Flags that mean "an integrity check failed" (status rejected_runtime). Prefix match before ":".
INTEGRITY_FLAGS = frozenset({
    "inputs_mutated", "output_aliases_input", "output_not_plain_tensor", "unsynchronized_stream",
    "harness_tampered", "hidden_input_mismatch", "post_timing_mismatch", "write_outside_workdir",
    "spawned_process", "network_access", "gc_introspection", "frame_inspection", "tracing", "ctypes_use",
    "proc_access", "result_channel_forged", "triton_launch_skipped_in_timing", "signal_sent",
})


def is_integrity_flag(flag: str) -> bool:
    return flag.split(":", 1)[0] in INTEGRITY_FLAGS


def _fmt_exc(limit: int = 4000) -> str:
    import traceback

    s = traceback.format_exc()
    return s if len(s) <= limit else s[: limit // 4] + "\n...\n" + s[-3 * limit // 4:]


def _apply_rlimits(limits: dict[str, Any]) -> None:
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


class _Guard:
    """The audit-hook monitor of the answer's process (see the module docstring). Blocks by raising
    PermissionError; reports every violation to the parent immediately."""

    _WRITE_PATH_EVENTS = {"os.remove": 0, "os.rmdir": 0, "os.rename": (0, 1), "os.mkdir": 0, "os.chmod": 0,
                          "os.chown": 0, "os.link": (0, 1), "os.symlink": 1, "os.truncate": 0, "os.utime": 0,
                          "shutil.rmtree": 0, "shutil.copyfile": 1, "shutil.copytree": 1, "shutil.move": 1}
    _SPAWN_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                     "os.forkpty", "pty.spawn", "os.startfile"}
    _GC_EVENTS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
    _NET_EVENTS = {"socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
                   "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg", "socket.getnameinfo",
                   "urllib.Request", "http.client.connect"}
    _CTYPES_EVENTS = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.string_at",
                      "ctypes.wstring_at", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.call_function",
                      "ctypes.addressof", "ctypes.create_string_buffer", "ctypes.create_unicode_buffer",
                      "ctypes.get_errno", "ctypes.set_errno", "ctypes.PyObj_FromPtr", "ctypes.memmove",
                      "ctypes.memset"}

    def __init__(self, sender: Sender, workdir: str, answer_file: str, allowed_spawn_pkgs: tuple[str, ...]) -> None:
        import sysconfig

        self.sender = sender
        self.roots = [os.path.realpath(workdir)]
        self.answer_file = os.path.realpath(answer_file)
        self.enforcing = False
        self.busy = False
        self.seen: list[str] = []
        self.pid = os.getpid()
        self.allowed_spawn_pkgs = allowed_spawn_pkgs
        self._getframe = sys._getframe
        self._rp_cache: dict[str, str] = {}
        base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
        self.site_dirs = tuple({os.path.realpath(p) + os.sep for p in
                                (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])})
        self.stdlib_dirs = tuple({os.path.realpath(p) + os.sep for p in (base["stdlib"], base["platstdlib"])})
        self.harness_files = {os.path.realpath(__file__),
                              os.path.realpath(os.path.join(os.path.dirname(__file__), "timing.py"))}
        self.inspect_files = {os.path.realpath(os.path.join(base["stdlib"], "inspect.py"))}
        self.watched = frozenset(set(self._WRITE_PATH_EVENTS) | self._SPAWN_EVENTS | self._GC_EVENTS
                                 | self._NET_EVENTS | self._CTYPES_EVENTS | {
                                     "open", "sys._getframe", "sys._current_frames", "object.__getattr__",
                                     "sys.settrace", "sys.setprofile", "os.kill", "os.killpg",
                                     "signal.pthread_kill"})

    def _realpath(self, fn: str) -> str:
        # Cached: this runs inside the audit hook, possibly on hot paths.
        rp = self._rp_cache.get(fn)
        if rp is None:
            rp = fn if fn.startswith("<") else os.path.realpath(fn)
            if len(self._rp_cache) < 10000:
                self._rp_cache[fn] = rp
        return rp

    # -- origin of the event: the innermost frame that is neither stdlib nor harness ---------------------------
    def _origin(self) -> str:
        f = self._getframe(2)
        while f is not None:
            fn = f.f_code.co_filename
            rp = self._realpath(fn)
            if rp == self.answer_file:
                return "answer"
            if rp.startswith(self.site_dirs):
                rest = rp[len(next(d for d in self.site_dirs if rp.startswith(d))):]
                return "library:" + rest.split(os.sep, 1)[0]
            if fn.startswith("<") or rp.startswith(self.stdlib_dirs) or rp in self.harness_files:
                f = f.f_back
                continue
            return "other:" + rp
        return "unknown"

    def _direct_caller_is_answer(self) -> bool:
        # For frame access: only direct calls from answer code (through inspect.py) count, so stdlib helpers
        # that look at their caller's frame (namedtuple, enum, logging) are not reported.
        f = self._getframe(1)
        while f is not None and self._realpath(f.f_code.co_filename) in self.harness_files:
            f = f.f_back  # the hook's own frames
        while f is not None and self._realpath(f.f_code.co_filename) in self.inspect_files:
            f = f.f_back
        return f is not None and self._realpath(f.f_code.co_filename) == self.answer_file

    def _outside(self, path: Any) -> bool:
        if isinstance(path, int):
            return False
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            path = os.fspath(path)
        rp = os.path.realpath(path)
        if rp in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"):
            return False
        return not any(rp == r or rp.startswith(r + os.sep) for r in self.roots)

    def _violation(self, flag: str, detail: str, block: bool = True) -> None:
        if flag not in self.seen:
            self.seen.append(flag)
        try:
            self.sender.send({"type": "event", "flag": flag, "detail": detail[:300]})
        except OSError:
            pass
        if block:
            raise PermissionError(f"blocked by the evaluation harness: {flag} ({detail[:200]})")

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.enforcing or self.busy or event not in self.watched:
            return
        self.busy = True
        try:
            self._check(event, args)
        finally:
            self.busy = False

    def _check(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            if writing and self._outside(path):
                self._violation("write_outside_workdir", f"open({path!r}, {mode!r})")
            if isinstance(path, (str, bytes)):
                p = os.fsdecode(path)
                if p.startswith("/proc/"):
                    part = p.split("/")[2]
                    if part.isdigit() and int(part) != self.pid:
                        self._violation("proc_access", p)
            return
        if event in self._WRITE_PATH_EVENTS:
            idx = self._WRITE_PATH_EVENTS[event]
            for i in (idx if isinstance(idx, tuple) else (idx,)):
                if i < len(args) and args[i] is not None and self._outside(args[i]):
                    self._violation("write_outside_workdir", f"{event}({args[i]!r})")
            return
        if event in self._SPAWN_EVENTS:
            origin = self._origin()
            if not any(origin == "library:" + p for p in self.allowed_spawn_pkgs):
                self._violation("spawned_process", f"{event} {str(args[:2])[:200]} from {origin}")
            return
        if event in self._NET_EVENTS:  # from anywhere: nothing in an evaluation needs the network
            self._violation("network_access", f"{event} {str(args)[:200]}")
            return
        if event in self._CTYPES_EVENTS:  # torch/triton use ctypes internally; answer code may not
            if self._origin() == "answer":
                self._violation("ctypes_use", event)
            return
        if event in self._GC_EVENTS:
            if self._origin() == "answer":
                self._violation("gc_introspection", event)
            return
        if event in ("sys._getframe", "sys._current_frames"):
            if self._direct_caller_is_answer():
                self._violation("frame_inspection", event)
            return
        if event == "object.__getattr__":
            name = args[1] if len(args) > 1 else ""
            if name in ("tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back") and self._direct_caller_is_answer():
                self._violation("frame_inspection", f"getattr {name}")
            return
        if event in ("sys.settrace", "sys.setprofile"):
            if self._origin() == "answer":
                self._violation("tracing", event)
            return
        if event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            if self._origin() == "answer":
                self._violation("signal_sent", f"{event}{args}")
            return


class _LaunchCounter:
    """Counts Triton kernel launches: the interpreter's grid executor (TRITON_INTERPRET=1) and, compiled, the
    launch-enter hook that Triton's launcher calls (``knobs.runtime.launch_enter_hook``: a hook chain in recent
    Triton, a single callable in older ones, ``CompiledKernel.launch_enter_hook`` in the oldest). A compiled-mode
    call counts only when the hook's nearest Python caller is Triton's own code (the answer calling the hook
    chain itself does not count)."""

    def __init__(self) -> None:
        import triton

        self.count = 0
        self._getframe = sys._getframe
        self.installed: list[tuple[Any, str, Any]] = []  # (owner, attribute, our object): checked for tampering
        try:
            import triton.knobs as knobs  # Triton >= 3.4
        except ImportError:
            knobs = None
        self.interpret = bool(knobs.runtime.interpret) if knobs is not None else os.environ.get(
            "TRITON_INTERPRET", "0") not in ("", "0")
        self.triton_dir = os.path.dirname(os.path.realpath(triton.__file__)) + os.sep
        self.chain: Any = None
        if self.interpret:
            from triton.runtime.interpreter import GridExecutor

            orig = GridExecutor.__call__
            counter = self

            def counted_call(self_: Any, *args: Any, **kwargs: Any) -> Any:
                counter.count += 1
                return orig(self_, *args, **kwargs)

            GridExecutor.__call__ = counted_call
            self.installed.append((GridExecutor, "__call__", counted_call))
            return
        hook = self._make_hook()
        self.hook = hook
        if knobs is not None:
            current = knobs.runtime.launch_enter_hook
            if hasattr(current, "add") and hasattr(current, "calls"):
                current.add(hook)
                self.chain = current
                return
            if current is not None:
                prev = current

                def both(*a: Any, **k: Any) -> Any:
                    hook(*a, **k)
                    return prev(*a, **k)

                knobs.runtime.launch_enter_hook = both
                self.installed.append((knobs.runtime, "launch_enter_hook", both))
            else:
                knobs.runtime.launch_enter_hook = hook
                self.installed.append((knobs.runtime, "launch_enter_hook", hook))
            return
        from triton.compiler.compiler import CompiledKernel  # oldest Triton: a class attribute

        CompiledKernel.launch_enter_hook = staticmethod(hook)
        self.installed.append((CompiledKernel, "launch_enter_hook", CompiledKernel.__dict__["launch_enter_hook"]))

    def _make_hook(self) -> Callable[..., None]:
        counter = self
        triton_dir = self.triton_dir
        getframe = self._getframe
        known: dict[str, bool] = {}  # co_filename -> inside the triton package (cached: this runs per launch)

        def on_launch(*_args: Any, **_kw: Any) -> None:
            f = getframe(1)
            while f is not None and f.f_code.co_filename.endswith("knobs.py"):
                f = f.f_back  # the hook chain's own frame
            if f is None:
                return
            fn = f.f_code.co_filename
            ok = known.get(fn)
            if ok is None:
                ok = known[fn] = os.path.realpath(fn).startswith(triton_dir) and not fn.endswith("knobs.py")
            if ok:
                counter.count += 1

        return on_launch

    def take(self) -> int:
        n, self.count = self.count, 0
        return n

    def intact(self) -> bool:
        for owner, attr, obj in self.installed:
            cur = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
            if cur is not obj:
                return False
        if self.chain is not None:
            import triton.knobs as knobs

            if knobs.runtime.launch_enter_hook is not self.chain or self.hook not in self.chain.calls:
                return False
        return True


class _TamperCheck:
    """Identity snapshot of the functions, classes and flags the harness relies on (taken before the answer is
    imported); ``changed()`` lists what differs now."""

    def __init__(self, torch: Any, extra: dict[str, Callable[[], Any]], launch: _LaunchCounter | None) -> None:
        import builtins
        import time as time_mod

        g: dict[str, Callable[[], Any]] = {}
        T = torch.Tensor
        for n in ("allclose", "isclose", "equal", "manual_seed", "rand", "randn", "randint", "empty", "empty_like",
                  "zeros", "ones", "no_grad", "is_grad_enabled", "set_grad_enabled", "get_float32_matmul_precision",
                  "set_float32_matmul_precision", "Tensor", "isnan", "frombuffer", "get_default_dtype", "device"):
            g[f"torch.{n}"] = (lambda n=n: getattr(torch, n, None))
        for n in ("clone", "copy_", "cpu", "to", "fill_", "detach", "contiguous", "view", "reshape", "data_ptr",
                  "untyped_storage", "numpy", "__eq__", "__ne__", "equal", "zero_", "numel", "element_size",
                  "__torch_function__", "size", "stride", "dtype", "device", "is_floating_point", "storage_offset"):
            g[f"torch.Tensor.{n}"] = (lambda n=n: T.__dict__.get(n, getattr(T, n, None)))
        for n in ("__call__", "_call_impl", "to", "_apply"):
            g[f"torch.nn.Module.{n}"] = (lambda n=n: getattr(torch.nn.Module, n, None))
        for n in ("synchronize", "Event", "Stream", "current_stream", "manual_seed", "manual_seed_all",
                  "is_available", "set_device", "stream", "default_stream"):
            g[f"torch.cuda.{n}"] = (lambda n=n: getattr(torch.cuda, n, None))
        for n in ("record", "elapsed_time", "synchronize", "query", "wait"):
            g[f"torch.cuda.Event.{n}"] = (lambda n=n: getattr(torch.cuda.Event, n, None))
        for n in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "sleep"):
            g[f"time.{n}"] = (lambda n=n: getattr(time_mod, n, None))
        for n in ("write", "read", "getpid", "_exit"):
            g[f"os.{n}"] = (lambda n=n: getattr(os, n, None))
        for n in ("type", "isinstance", "len", "getattr", "setattr", "id", "__import__", "open", "hasattr"):
            g[f"builtins.{n}"] = (lambda n=n: getattr(builtins, n, None))
        for m in ("torch", "time", "os", "sys", "builtins", "json", "hmac", "triton", "workflow_scripts.timing"):
            g[f"sys.modules[{m}]"] = (lambda m=m: sys.modules.get(m))
        g["select.select"] = lambda: select.select
        g["hmac.new"] = lambda: hmac.new
        g["json.dumps"] = lambda: json.dumps
        # Values, not identities.
        g["tf32:cuda_matmul_allow_tf32"] = lambda: bool(torch.backends.cuda.matmul.allow_tf32)
        g["tf32:cudnn_allow_tf32"] = lambda: bool(torch.backends.cudnn.allow_tf32)
        g["tf32:float32_matmul_precision"] = lambda: _call_str(torch.get_float32_matmul_precision)
        g["default_dtype"] = lambda: str(torch.get_default_dtype())
        # Informational only (reported as global_state_changed:<name>): they tune the answer's own PyTorch calls.
        g["info:cudnn.benchmark"] = lambda: bool(torch.backends.cudnn.benchmark)
        g["info:cudnn.deterministic"] = lambda: bool(torch.backends.cudnn.deterministic)
        g.update(extra)
        self.getters = g
        self.expected = {k: f() for k, f in g.items()}
        self._value_keys = {k for k in g if k.startswith(("tf32:", "info:", "default_dtype"))}
        self.launch = launch

    def changed(self) -> list[str]:
        bad = []
        for k, f in self.getters.items():
            try:
                v = f()
            except Exception:  # noqa: BLE001 - a getter that now raises means something was replaced
                bad.append(k)
                continue
            exp = self.expected[k]
            if (v != exp) if k in self._value_keys else (v is not exp):
                bad.append(k)
        if self.launch is not None and not self.launch.intact():
            bad.append("triton_launch_hook")
        return bad


def _call_str(f: Callable[[], Any]) -> str:
    try:
        return str(f())
    except Exception:  # noqa: BLE001
        return "<error>"


class _Child:
    """Everything the child needs, set up before any answer code runs."""

    def __init__(self, init: dict[str, Any], sender: Sender) -> None:
        import builtins

        self.init = init
        self.sender = sender
        self.role = init["role"]
        self.device_kind = init["device"]
        self.seed = int(init.get("seed", 42))
        self._type = builtins.type
        self._isinstance = builtins.isinstance
        import torch

        self.torch = torch
        self.Tensor = torch.Tensor
        self.manual_seed = torch.manual_seed
        self.cuda_manual_seed = torch.cuda.manual_seed
        self.no_grad = torch.no_grad
        self.clone = torch.Tensor.clone
        self.to = torch.Tensor.to
        self.contiguous = torch.Tensor.contiguous
        self.view = torch.Tensor.view
        self.reshape = torch.Tensor.reshape
        self.equal = torch.equal
        self.untyped_storage = torch.Tensor.untyped_storage
        self.copy_ = torch.Tensor.copy_
        if self.device_kind == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("CUDA requested but torch.cuda.is_available() is False in the child")
            torch.cuda.init()
            self.device = torch.device("cuda", 0)
            torch.cuda.set_device(0)
        else:
            self.device = torch.device("cpu")
        self.tf32 = self._configure_tf32(init.get("tf32", "pytorch_default"))
        from workflow_scripts import timing

        self.timing = timing
        tp = init.get("timing") or {}
        self.protocol = timing.TimingProtocol(**tp) if tp else timing.TimingProtocol.for_device(self.device_kind)
        self.clock = timing.Clock(self.device_kind, self.protocol.l2_flush_mib)
        self.triton = None
        self.stdin = sys.stdin.buffer  # captured before any answer code runs
        if self.role == "answer":
            import triton
            import triton.language  # noqa: F401 - import before the answer so its cost is not the answer's

            self.triton = triton
            if self.device_kind == "cuda":
                # Build Triton's driver helpers now (it compiles a small C module), not inside the answer's call.
                try:
                    triton.runtime.driver.active.get_current_device()
                    triton.runtime.driver.active.utils  # noqa: B018
                except Exception:  # noqa: BLE001 - the answer's own launch will report it
                    pass

    def _configure_tf32(self, mode: str) -> dict[str, Any]:
        torch = self.torch
        if mode == "ieee":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.set_float32_matmul_precision("highest")
        elif mode != "pytorch_default":
            raise ValueError(f"unknown tf32 mode {mode!r}")
        flags = {
            "mode": mode,
            "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": str(torch.get_float32_matmul_precision()),
        }
        for name, get in (("cuda_matmul_fp32_precision", lambda: torch.backends.cuda.matmul.fp32_precision),
                          ("cudnn_conv_fp32_precision", lambda: torch.backends.cudnn.conv.fp32_precision)):
            try:
                flags[name] = str(get())
            except Exception:  # noqa: BLE001 - older/newer torch may lack the new API
                pass
        return flags

    # -- problem loading -------------------------------------------------------------------------------------
    def load_module(self, path: str, name: str) -> Any:
        import importlib.util

        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # Triton and dataclasses look modules up by name
        spec.loader.exec_module(mod)
        return mod

    def set_seed(self, seed: int) -> None:
        self.manual_seed(seed)
        if self.device_kind == "cuda":
            self.cuda_manual_seed(seed)

    def process(self, x: Any) -> Any:
        # KernelBench casts every input tensor to fp32; we cast only floating ones (integer targets stay integer).
        if self._isinstance(x, self.Tensor):
            if x.is_floating_point():
                x = self.to(x, dtype=self.torch.float32)
            return self.to(x, device=self.device)
        return x

    def make_inputs(self, problem: Any, seed: int) -> list[Any]:
        self.set_seed(seed)
        return [self.process(x) for x in problem.get_inputs()]

    def build_model(self, cls: Any, problem: Any) -> Any:
        self.set_seed(self.seed)
        init_inputs = [self.process(x) for x in problem.get_init_inputs()]
        with self.no_grad():
            self.set_seed(self.seed)
            model = cls(*init_inputs)
            model = model.to(device=self.device, dtype=self.torch.float32)
        return model

    # -- outputs -------------------------------------------------------------------------------------------------
    def flatten(self, out: Any) -> tuple[str, list[Any]]:
        if self._isinstance(out, (tuple, list)) and self._type(out) in (tuple, list):
            return "sequence", list(out)
        return "tensor", [out]

    def bitwise_equal(self, a: Any, b: Any) -> bool:
        torch = self.torch
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.numel() == 0:
            return True
        ac = self.reshape(self.contiguous(a), (-1,))
        bc = self.reshape(self.contiguous(b), (-1,))
        if a.dtype == torch.bool:
            return bool(self.equal(ac, bc))
        return bool(self.equal(self.view(ac, torch.uint8), self.view(bc, torch.uint8)))

    def payload(self, tensors: list[Any]) -> tuple[list[dict[str, Any]], list[memoryview]]:
        metas, chunks = [], []
        for t in tensors:
            c = self.contiguous(self.to(t.detach(), device="cpu"))
            flat = self.reshape(c, (-1,))
            raw = self.view(flat, self.torch.uint8) if flat.numel() else flat
            mv = memoryview(raw.numpy()) if raw.numel() else memoryview(b"")
            metas.append({"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                          "device": str(t.device), "nbytes": mv.nbytes})
            chunks.append(mv)
        return metas, chunks


def _read_init() -> dict[str, Any]:
    line = sys.stdin.buffer.readline()
    return json.loads(line)


def _read_cmd(stdin: Any) -> dict[str, Any]:
    line = stdin.readline()
    if not line:
        os._exit(3)  # the parent is gone
    return json.loads(line)


def _run_reference(c: _Child, problem: Any) -> None:
    model = c.build_model(problem.Model, problem)
    c.sender.send({"type": "loaded"})
    stdin = c.stdin
    while True:
        cmd = _read_cmd(stdin)
        if cmd["cmd"] == "finish":
            c.sender.send({"type": "done"})
            return
        if cmd["cmd"] != "trial":
            continue
        seed = int(cmd["seed"])
        inputs = c.make_inputs(problem, seed)
        with c.no_grad():
            c.set_seed(seed)
            t0 = time.perf_counter()
            out = model(*inputs)
            if c.device_kind == "cuda":
                c.torch.cuda.synchronize()
            ms = (time.perf_counter() - t0) * 1e3
        structure, outs = c.flatten(out)
        outs = [o if isinstance(o, c.Tensor) else c.torch.as_tensor(o) for o in outs]
        metas, chunks = c.payload(outs)
        in_meta = [{"dtype": str(x.dtype).replace("torch.", ""), "shape": list(x.shape)} if isinstance(x, c.Tensor)
                   else {"type": type(x).__name__} for x in inputs]
        c.sender.send({"type": "output", "index": cmd.get("index"), "structure": structure, "outputs": metas,
                       "forward_ms": ms, "inputs": in_meta}, chunks)
        del out, outs, inputs


def _run_answer(c: _Child, problem: Any, init: dict[str, Any]) -> None:
    import threading

    torch = c.torch
    sender = c.sender
    require_triton = bool(init.get("require_triton", True))
    launch = _LaunchCounter()
    guard = _Guard(sender, init["workdir"], os.path.join(init["workdir"], init["answer"]),
                   allowed_spawn_pkgs=("triton",))
    threads_before = {t.ident for t in threading.enumerate()}
    sys.addaudithook(guard.hook)  # cannot be removed from Python code
    guard.enforcing = True
    # Identity snapshot: taken now, before the answer exists in this process.
    me = sys.modules[__name__]
    extra: dict[str, Callable[[], Any]] = {}
    for k in list(vars(me)):
        extra[f"harness.{k}"] = (lambda k=k: vars(me).get(k))
    for k in list(vars(c.timing)):
        extra[f"timing.{k}"] = (lambda k=k: vars(c.timing).get(k))
    for k in list(vars(c.clock)):
        extra[f"clock.{k}"] = (lambda k=k: vars(c.clock).get(k))
    for k in list(vars(c)):
        extra[f"child.{k}"] = (lambda k=k: vars(c).get(k))
    for k in list(vars(guard)):
        if k not in ("busy", "seen", "_rp_cache"):
            extra[f"guard.{k}"] = (lambda k=k: vars(guard).get(k))
    for k in ("hook", "_check", "_origin", "_direct_caller_is_answer", "_outside", "_violation", "_realpath"):
        extra[f"guard.class.{k}"] = (lambda k=k: _Guard.__dict__.get(k))
    tamper = _TamperCheck(torch, extra, launch)
    flags: list[str] = []

    def flag(f: str) -> None:
        if f not in flags:
            flags.append(f)

    def check_tamper() -> None:
        changed = tamper.changed()
        for name in [n for n in changed if not n.startswith("info:")][:5]:
            flag(f"harness_tampered:{name}")
        for name in [n for n in changed if n.startswith("info:")]:
            flag(f"global_state_changed:{name[5:]}")

    sender.send({"type": "hello", "tf32": c.tf32, "interpret": launch.interpret, "pid": os.getpid(),
                 "torch": torch.__version__, "triton": c.triton.__version__ if c.triton else None})

    # ---- load the answer: everything from here on may be hostile ----
    try:
        ans = c.load_module(os.path.join(init["workdir"], init["answer"]), "kb_answer")
    except Exception:  # noqa: BLE001 - includes SyntaxError
        sender.send({"type": "load_error", "error": _fmt_exc(), "flags": flags})
        os._exit(0)
    model_cls = getattr(ans, "ModelNew", None)
    if model_cls is None:
        sender.send({"type": "no_model_new", "error": "the answer module defines no ModelNew", "flags": flags})
        os._exit(0)
    sender.send({"type": "imported", "flags": flags})  # KernelBench's "compiled" from here on
    try:
        model = c.build_model(model_cls, problem)
    except Exception:  # noqa: BLE001
        check_tamper()
        sender.send({"type": "init_error", "error": _fmt_exc(), "flags": flags})
        os._exit(0)
    check_tamper()
    sender.send({"type": "loaded", "flags": flags})
    try:
        _answer_loop(c, problem, model, launch, guard, flag, flags, check_tamper, require_triton, threads_before)
    except Exception:  # noqa: BLE001 - the harness choked on something the answer produced
        check_tamper()
        sender.send({"type": "runtime_error", "index": None, "kind": "harness", "error": _fmt_exc(), "flags": flags})
    os._exit(0)


def _answer_loop(c: _Child, problem: Any, model: Any, launch: _LaunchCounter, guard: _Guard,
                 flag: Callable[[str], None], flags: list[str], check_tamper: Callable[[], None],
                 require_triton: bool, threads_before: set[Any]) -> None:
    import threading

    torch = c.torch
    sender = c.sender
    is_cuda = c.device_kind == "cuda"
    sync = torch.cuda.synchronize if is_cuda else None
    clone, equal_bits, storage = c.clone, c.bitwise_equal, c.untyped_storage
    _type, Tensor, _isinstance = c._type, c.Tensor, c._isinstance
    perf = c.clock.perf_counter
    timing_inputs: list[Any] | None = None

    def context_broken() -> bool:
        if not is_cuda:
            return False
        try:
            sync()
            return False
        except Exception:  # noqa: BLE001 - a sticky CUDA error
            return True

    def fail(index: Any, kind: str) -> None:
        err = _fmt_exc()
        check_tamper()
        sender.send({"type": "cuda_error" if context_broken() else "runtime_error", "index": index, "kind": kind,
                     "error": err, "flags": flags})
        os._exit(0)

    def input_ptrs(inputs: list[Any]) -> set[int]:
        return {storage(x).data_ptr() for x in inputs if _isinstance(x, Tensor) and x.numel()}

    def run_once(inputs: list[Any], seed: int | None, index: Any, kind: str) -> None:
        snapshot = [clone(x) if _isinstance(x, Tensor) else x for x in inputs]
        launch.take()
        t0 = perf()
        try:
            with c.no_grad():
                if seed is not None:
                    c.set_seed(seed)
                t0 = perf()
                out = model(*inputs)
        except Exception:  # noqa: BLE001
            fail(index, kind)
        ms = (perf() - t0) * 1e3
        launches = launch.take()
        structure, outs = c.flatten(out)
        # Exact type: a subclass could compute lazily inside whatever later inspects it.
        bad_types = [_type(o).__module__ + "." + _type(o).__qualname__ for o in outs if _type(o) is not Tensor]
        if bad_types:
            subclass = any(_isinstance(o, Tensor) for o in outs)
            check_tamper()
            if subclass:
                flag("output_not_plain_tensor")
            sender.send({"type": "bad_output", "index": index, "kind": kind, "subclass": subclass,
                         "error": f"output types {bad_types}", "launches": launches, "flags": flags})
            return
        if is_cuda:
            try:
                snap = [clone(o) for o in outs]  # stream-ordered: what a consumer on the current stream sees
                sync()
            except Exception:  # noqa: BLE001 - asynchronous CUDA errors surface here
                fail(index, kind)
            ms = (perf() - t0) * 1e3
            if not all(equal_bits(a, b) for a, b in zip(snap, outs)):
                flag("unsynchronized_stream")
            send_outs = snap
        else:
            send_outs = outs
        ptrs = input_ptrs(inputs)
        if any(o.numel() and storage(o).data_ptr() in ptrs for o in outs):
            flag("output_aliases_input")
        for x, s in zip(inputs, snapshot):
            if _isinstance(x, Tensor) and not equal_bits(x, s):
                flag("inputs_mutated")
                break
        check_tamper()
        metas, chunks = c.payload(send_outs)
        sender.send({"type": "output", "index": index, "kind": kind, "structure": structure, "outputs": metas,
                     "launches": launches, "forward_ms": ms, "flags": flags}, chunks)

    stdin = c.stdin
    while True:
        cmd = _read_cmd(stdin)
        name = cmd.get("cmd")
        if name == "trial":
            seed = int(cmd["seed"])
            inputs = c.make_inputs(problem, seed)
            run_once(inputs, seed, cmd.get("index"), cmd.get("kind", "seeded"))
            del inputs
        elif name == "time":
            timing_inputs = c.make_inputs(problem, int(cmd["seed"]))
            timing_snapshot = [clone(x) if _isinstance(x, Tensor) else x for x in timing_inputs]
            per_call: list[int] = []
            ptrs = input_ptrs(timing_inputs)

            def after(out: Any, phase: str) -> None:
                per_call.append(launch.take())
                _, outs = c.flatten(out)
                for o in outs:
                    if _type(o) is Tensor:
                        if o.numel() and storage(o).data_ptr() in ptrs:
                            flag("output_aliases_input")  # scrubbing it would destroy the inputs
                        else:
                            c.timing.scrub(o)
                check_tamper()

            launch.take()
            try:
                raw = c.clock.time_callable(model, timing_inputs, c.protocol, after)
            except Exception:  # noqa: BLE001
                fail("timing", "timing")
            for x, s in zip(timing_inputs, timing_snapshot):
                if _isinstance(x, Tensor) and not equal_bits(x, s):
                    flag("inputs_mutated")
                    break
            del timing_snapshot
            if require_triton and per_call and min(per_call) == 0:
                flag("triton_launch_skipped_in_timing")
            check_tamper()
            sender.send({"type": "timing", "raw": raw.to_dict(), "launches_per_call": per_call, "flags": flags})
        elif name == "post_timing":
            # Overwrite the timed input tensors in place (same storage, same addresses) with fresh inputs.
            if timing_inputs is None:
                raise RuntimeError("post_timing before time")
            fresh = c.make_inputs(problem, int(cmd["seed"]))
            with c.no_grad():
                for i, (t, f) in enumerate(zip(timing_inputs, fresh)):
                    if _isinstance(t, Tensor) and _isinstance(f, Tensor) and t.shape == f.shape and t.dtype == f.dtype:
                        c.copy_(t, f)
                    else:
                        timing_inputs[i] = f
            del fresh
            run_once(timing_inputs, int(cmd["seed"]), "post_timing", "post_timing")
        elif name == "finish":
            check_tamper()
            new_threads = [t.name for t in threading.enumerate() if t.ident not in threads_before]
            sender.send({"type": "done", "flags": flags, "guard_flags": list(guard.seen),
                         "threads_started": new_threads[:10]})
            sys.stdout.flush()
            os._exit(0)


def _run_baseline(c: _Child, problem: Any, init: dict[str, Any]) -> None:
    torch = c.torch
    sender = c.sender
    model = c.build_model(problem.Model, problem)
    sender.send({"type": "loaded", "tf32": c.tf32})
    inputs = c.make_inputs(problem, c.seed)  # KernelBench times on the seed-42 inputs
    in_ptrs = {c.untyped_storage(x).data_ptr() for x in inputs if isinstance(x, c.Tensor) and x.numel()}

    def after(out: Any, phase: str) -> None:
        _, outs = c.flatten(out)
        for o in outs:
            if isinstance(o, c.Tensor) and not (o.numel() and c.untyped_storage(o).data_ptr() in in_ptrs):
                c.timing.scrub(o)

    eager_ref = None
    stdin = c.stdin
    while True:
        cmd = _read_cmd(stdin)
        name = cmd.get("cmd")
        if name == "eager":
            try:
                with c.no_grad():
                    _, o = c.flatten(model(*inputs))
                    eager_ref = [x.detach().to("cpu").clone() for x in o if isinstance(x, c.Tensor)]
                raw = c.clock.time_callable(model, inputs, c.protocol, after)
                sender.send({"type": "timing", "raw": raw.to_dict()})
            except Exception:  # noqa: BLE001
                sender.send({"type": "error", "error": _fmt_exc()})
        elif name == "compile":
            try:
                if eager_ref is None:  # reference values for compile_max_abs_diff_vs_eager
                    with c.no_grad():
                        _, o = c.flatten(model(*inputs))
                        eager_ref = [x.detach().to("cpu").clone() for x in o if isinstance(x, c.Tensor)]
                torch._dynamo.reset()
                compiled = torch.compile(model, mode=cmd.get("mode", "max-autotune"), backend="inductor")
                t0 = time.perf_counter()
                with c.no_grad():
                    first = compiled(*inputs)
                    if c.device_kind == "cuda":
                        torch.cuda.synchronize()
                compile_s = time.perf_counter() - t0
                diff = None
                _, fo = c.flatten(first)
                if eager_ref is not None:
                    try:
                        diff = max(float((a.double() - b.detach().to("cpu").double()).abs().max()) if a.numel() else 0.0
                                   for a, b in zip(eager_ref, fo))
                    except Exception:  # noqa: BLE001
                        diff = None
                del first, fo
                raw = c.clock.time_callable(compiled, inputs, c.protocol, after)
                sender.send({"type": "timing", "raw": raw.to_dict(), "compile_time_s": compile_s,
                             "max_abs_diff_vs_eager": diff})
            except Exception:  # noqa: BLE001
                sender.send({"type": "error", "error": _fmt_exc()})
        elif name == "finish":
            sender.send({"type": "done"})
            sys.stdout.flush()
            os._exit(0)


def main() -> None:
    init = _read_init()
    _apply_rlimits(init.get("limits") or {})
    # Our package is on PYTHONPATH; the working directory (the answer's folder) must not shadow modules.
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    sender = Sender(int(init["fd"]), bytes.fromhex(init["nonce"]))
    import faulthandler

    faulthandler.enable()
    try:
        c = _Child(init, sender)
    except Exception:  # noqa: BLE001
        sender.send({"type": "setup_error", "error": _fmt_exc()})
        os._exit(0)
    try:
        problem = c.load_module(os.path.join(init["workdir"], init["problem"]), "kb_problem")
        if c.role == "reference":
            sender.send({"type": "hello", "tf32": c.tf32, "torch": c.torch.__version__})
    except Exception:  # noqa: BLE001
        sender.send({"type": "setup_error", "error": "loading the problem failed:\n" + _fmt_exc()})
        os._exit(0)
    try:
        if c.role == "reference":
            _run_reference(c, problem)
        elif c.role == "answer":
            _run_answer(c, problem, init)
        elif c.role == "baseline":
            _run_baseline(c, problem, init)
        else:
            raise ValueError(f"unknown role {c.role!r}")
    except Exception:  # noqa: BLE001 - harness-side failures (reference role: the reference failed)
        sender.send({"type": "setup_error", "error": _fmt_exc()})
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
