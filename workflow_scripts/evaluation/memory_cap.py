"""The host-memory cap on an answer's process and everything it starts (``sandbox.ChildProcess`` applies it).

Per-process limits do not bound a tree: RLIMIT_AS is per process (and unusable under CUDA, which reserves huge
virtual ranges), and neither sees shared memory that is written but never mapped (a memfd filled with ``write``).
So the cap is on the whole tree, in one of two ways, the first the host allows:

* ``cgroup``: a memory cgroup of its own per child (cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes`` and,
  where swap accounting exists, ``memory.memsw.limit_in_bytes``). The child's first process joins it before it
  execs anything (``prefix``), so every process the answer starts is in it; the kernel charges its anonymous and
  shared pages and kills inside it when the limit is reached. The child cannot leave it: inside the sandbox every
  mount, /sys/fs/cgroup included, is read-only. A v1 OOM kill takes only the largest process; the trusted side's
  watcher then kills the whole tree (v2: ``memory.oom.group``). At the end every process still in the cgroup is
  killed and the cgroup removed.
* ``watch``: where no cgroup can be made (a container without a writable memory hierarchy), the trusted side polls the
  tree every ``POLL_S`` seconds, between timed trials (``timing.TRIAL_GATE``): the resident anonymous and shared pages
  of every process in it (``RssAnon + RssShmem``) plus the allocated size of every memfd or /dev/shm file any of them
  holds open (written but unmapped memory is in no process's RSS), the child's own transport areas excepted; over the
  limit, the tree is killed. An allocation faster than the poll can overshoot by what it allocates in one interval (a
  few hundred MB), and memory that is in no process's pages or file table is not seen (``WATCH_LIMITS``): evidence
  against a hostile answer, not a bound. Said loudly, once per process, and recorded in every result's isolation
  warnings.

The limit is the configured memory (``RunConfig.memory_limit_gib``) plus the child's transport areas (its inputs
and outputs, which the trusted side sizes: they are mapped into the child and count against a cgroup once touched).
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from workflow_scripts.evaluation.timing import TRIAL_GATE

MODES = ("auto", "cgroup", "watch")
# What polling cannot see (found by attacking it, docs/evaluation.md): recorded with every result it bounded.
WATCH_LIMITS = ("host memory capped by polling, not by the kernel: socket buffers, memfds held only in flight over "
                "a socket, unmapped SysV segments and files in the private tmpfs (bounded by its own size cap) are "
                "not counted, and a fast allocation overshoots by one 50 ms poll; a memory cgroup holds all of them")
POLL_S = 0.05
_PREFIX = "kbeval-"  # per-child cgroup names: kbeval-<evaluator pid>-<token>


class MemoryCapUnavailable(RuntimeError):
    """``memory_cap: cgroup`` was configured and this host has no writable memory cgroup."""


@dataclass(frozen=True)
class CgroupRoot:
    """Where per-child memory cgroups are made."""

    version: int  # 1 or 2
    path: Path

    @property
    def limit_files(self) -> tuple[str, ...]:
        return _limit_files(self.version)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, options) of the cgroup file systems."""
    out = []
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                out.append((parts[1], parts[2], set(parts[3].split(","))))
    except OSError:
        pass
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup paths: "2" for the unified hierarchy, else per v1 controller name."""
    paths: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                paths["2"] = path
            for c in controllers.split(","):
                paths[c] = path
    except (OSError, ValueError):
        pass
    return paths


def _candidates() -> list[CgroupRoot]:
    own = _own_paths()
    found: list[CgroupRoot] = []
    for mount, fstype, opts in _mounts():
        if fstype == "cgroup2":
            version, rel = 2, own.get("2", "/")
        elif "memory" in opts:
            version, rel = 1, own.get("memory", "/")
        else:
            continue
        # Our own cgroup, never one above it: answers stay inside whatever bounds the evaluator (a Slurm step, a
        # systemd scope, a container). The mount's root only where our path is not visible in it (a cgroup
        # namespace: its root is our cgroup).
        base = Path(mount) / rel.lstrip("/")
        if not base.is_dir():
            base = Path(mount)
        if base.is_dir() and CgroupRoot(version, base) not in found:
            found.append(CgroupRoot(version, base))
    return sorted(found, key=lambda r: -r.version)  # v2 where both are there


def cgroup_headroom() -> int | None:
    """Bytes this process's memory cgroup can still be charged before a limit on it or on any cgroup above it is
    reached (the least of limit - usage over them), e.g. a Slurm job's memory; None where no limit applies or none
    can be read. The host's ``MemAvailable`` does not see such limits."""
    limits = _cgroup_limits()
    return min((max(0, limit - usage) for limit, usage in limits), default=None)


def cgroup_limit() -> int | None:
    """The least memory limit on this process's cgroup or any above it; None where none applies or none can be read."""
    return min((limit for limit, _ in _cgroup_limits()), default=None)


def _cgroup_limits() -> list[tuple[int, int]]:
    """(limit, usage) in bytes of each memory cgroup from this process's up to its hierarchy's root that has a
    limit, over every mounted hierarchy (v2, or v1's memory controller)."""
    own = _own_paths()
    found: list[tuple[int, int]] = []
    for mount, fstype, opts in _mounts():
        if fstype == "cgroup2":
            rel, limit_file, usage_file = own.get("2"), "memory.max", "memory.current"
        elif "memory" in opts:
            rel, limit_file, usage_file = own.get("memory"), "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        if rel is None:
            continue
        root = Path(mount)
        cgroup = root / rel.lstrip("/")
        if not cgroup.is_dir():
            cgroup = root  # a cgroup namespace: its root is our cgroup
        while True:
            limit, usage = _read_int(cgroup / limit_file), _read_int(cgroup / usage_file)
            if 0 <= limit < 1 << 62 and usage >= 0:  # "max" (v2) reads -1; v1's unlimited is near 2^63
                found.append((limit, usage))
            if cgroup == root:
                break
            cgroup = cgroup.parent
    return found


def _usable(root: CgroupRoot) -> bool:
    """A cgroup can be made under ``root`` with a memory limit of its own (tried, then removed)."""
    probe = root.path / f"{_PREFIX}probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        if root.version == 2 and not (probe / "memory.max").exists():
            try:  # the memory controller for our children (refused where the base itself holds processes)
                (root.path / "cgroup.subtree_control").write_text("+memory")
            except OSError:
                return False
        for name in root.limit_files:
            (probe / name).write_text(str(1 << 40))
        return True
    except OSError:
        return False
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass


_ROOT: list[CgroupRoot | None] = []  # detected once per process
_LOCK = threading.Lock()


def cgroup_root() -> CgroupRoot | None:
    with _LOCK:
        if not _ROOT:
            root = next((r for r in _candidates() if _usable(r)), None)
            if root is not None:
                _sweep(root)
            _ROOT.append(root)
        return _ROOT[0]


def _sweep(root: CgroupRoot) -> None:
    """Remove the cgroups an evaluator that died (its pid is in the name) left behind."""
    for d in root.path.glob(f"{_PREFIX}*"):
        try:
            owner = int(d.name[len(_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if owner != os.getpid() and not psutil.pid_exists(owner):
            _empty_and_remove(d, 2 if (d / "cgroup.kill").exists() else 1)


def _empty_and_remove(cgroup: Path, version: int, wait_s: float = 5.0) -> bool:
    """Kill every process in ``cgroup`` (v2: ``cgroup.kill``) and remove it; False (said) if it could not be."""
    if version == 2 and (cgroup / "cgroup.kill").exists():
        try:
            (cgroup / "cgroup.kill").write_text("1")
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            pids = []
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    try:
        cgroup.rmdir()
        return True
    except OSError as e:
        print(f"WARNING: evaluation sandbox: could not remove the memory cgroup {cgroup}: {e}", file=sys.stderr)
        return False


def resolve_mode(mode: str) -> str:
    """The mechanism ``mode`` ("auto" | "cgroup" | "watch") gets on this host: "cgroup" or "watch"."""
    if mode not in MODES:
        raise ValueError(f"memory_cap must be one of {MODES}, got {mode!r}")
    if mode == "watch":
        return "watch"
    if cgroup_root() is not None:
        return "cgroup"
    if mode == "cgroup":
        raise MemoryCapUnavailable("memory_cap=cgroup: no writable memory cgroup on this host (cgroup v2 with the "
                                   "memory controller delegated, or a v1 memory hierarchy)")
    _warn_once("host memory cap by polling (no writable memory cgroup on this host): an allocation faster than "
               f"the {POLL_S * 1e3:.0f} ms poll can overshoot the cap")
    return "watch"


_WARNED: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        print(f"WARNING: evaluation sandbox: {msg}", file=sys.stderr)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


@dataclass(eq=False)  # identity: the watcher's list holds each cap once
class TreeMemoryCap:
    """The cap on one child's process tree: ``prefix`` goes before the child's command line, ``attach`` after it
    started, ``close`` after it was killed and reaped."""

    mode: str  # "cgroup" | "watch"
    limit_bytes: int
    exempt_fds: tuple[int, ...] = ()  # the child's transport areas (memfds): counted in the limit already
    cgroup: Path | None = None
    version: int = 0
    peak_bytes: int = 0  # watch: the largest tree usage seen
    exceeded_bytes: int | None = None  # watch: the usage that had it killed
    pid: int | None = None
    killed: bool = False  # by the watcher: the cap was reached, or the tree could not be measured (failure)
    failure: str | None = None  # why the watcher could not measure the tree
    final: dict[str, Any] | None = None  # record() as it was when closed (a removed cgroup has no counters)
    _exempt: frozenset[tuple[int, int]] = field(default=frozenset())

    def __post_init__(self) -> None:
        if self.mode == "cgroup":
            root = cgroup_root()
            if root is None:
                raise MemoryCapUnavailable("no writable memory cgroup on this host")
            self.version = root.version
            self.cgroup = root.path / f"{_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
            self.cgroup.mkdir()
            try:
                for name in root.limit_files:
                    (self.cgroup / name).write_text(str(self.limit_bytes))
                swap = self.cgroup / ("memory.swap.max" if self.version == 2 else "memory.memsw.limit_in_bytes")
                if swap.exists():  # no way around the cap through swap
                    swap.write_text("0" if self.version == 2 else str(self.limit_bytes))
                if self.version == 2:  # an OOM kill takes the whole tree, not only its largest process
                    (self.cgroup / "memory.oom.group").write_text("1")
            except OSError:
                try:
                    self.cgroup.rmdir()
                except OSError:
                    pass  # the original error says why
                raise
        else:
            self._exempt = _inodes(self.exempt_fds)

    def prefix(self) -> list[str]:
        """The command prefix: the child's first process joins the cgroup, then execs the rest (cgroup mode)."""
        if self.cgroup is None:
            return []
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.cgroup / "cgroup.procs")]

    def add_areas(self, area_fds: tuple[int, ...], child_written_fds: tuple[int, ...] = ()) -> None:
        """Transport areas handed to the running tree (``sandbox.ChildProcess.deliver_areas``): before the tree gets
        them, the limit grows by what it may be charged for (``for_child``) and polling stops counting them."""
        grow = _area_allowance(self.mode, area_fds, child_written_fds)
        with _watcher().lock:  # the watcher compares against limit_bytes and skips _exempt under this lock
            if self.mode == "cgroup" and grow:
                assert self.cgroup is not None
                new = self.limit_bytes + grow
                # v1: the memory+swap limit may never be below the memory limit: it goes up first
                names = (("memory.memsw.limit_in_bytes",) if self.version == 1 else ()) + _limit_files(self.version)
                for name in names:
                    if (self.cgroup / name).exists():
                        (self.cgroup / name).write_text(str(new))
            self.limit_bytes += grow
            self.exempt_fds = (*self.exempt_fds, *area_fds)
            self._exempt = self._exempt | _inodes(area_fds)

    def attach(self, pid: int) -> None:
        """Start watching the tree of ``pid`` (the child leads its session): polled against the cap in watch mode;
        in cgroup mode killed as a whole once the kernel killed any process of it for memory (v1 kills only the
        largest, and the answer could go on without it)."""
        self.pid = pid
        _watcher().add(self)

    def exceeded(self) -> bool:
        """Whether the tree was killed for reaching the cap."""
        if self.final is not None:
            return bool(self.final["exceeded"])
        if self.mode == "watch" or self.failure:
            return self.exceeded_bytes is not None or self.failure is not None
        assert self.cgroup is not None
        # Killed for memory and the cgroup's own limit reached (a host-wide OOM kill alone is not the cap).
        if self.version == 2:
            events = self.cgroup / "memory.events"
            return _read_key(events, "oom_kill") > 0 and (_read_key(events, "oom") > 0 or _read_key(events, "max") > 0)
        # v1: failcnt is not kept by every kernel (0 here after an OOM kill at the limit): the peak at the limit says it
        reached = (_read_int(self.cgroup / "memory.failcnt") > 0
                   or _read_int(self.cgroup / "memory.max_usage_in_bytes") >= self.limit_bytes - (1 << 20))
        return _read_key(self.cgroup / "memory.oom_control", "oom_kill") > 0 and reached

    def peak(self) -> int | None:
        """The tree's largest memory use, where the mechanism records it (bytes)."""
        if self.final is not None:
            return self.final["peak_bytes"]
        if self.mode == "watch":
            return self.peak_bytes
        assert self.cgroup is not None
        v = _read_int(self.cgroup / ("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"))
        return v if v >= 0 else None

    def stop_watching(self) -> None:
        """The watcher lets go of this tree (it waits for a poll in progress): its owner kills and reaps it now."""
        if self.pid is not None:
            _watcher().remove(self)

    def kill_tree(self) -> None:
        self.killed = True
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the child leads its session: with a PID namespace, everything
        except (OSError, TypeError):
            pass

    def describe(self) -> str:
        if self.failure:
            return f"killed: its host memory could not be measured against the cap ({self.failure})"
        used = self.exceeded_bytes if self.mode == "watch" else self.peak()
        return (f"killed: host memory cap exceeded ({_gib(used)} used, the cap is {_gib(self.limit_bytes)}; "
                f"{self.mode})")

    @property
    def mechanism(self) -> str:
        """What the results record: "cgroup_v2" | "cgroup_v1" | "watch"."""
        return f"cgroup_v{self.version}" if self.mode == "cgroup" else "watch"

    def record(self) -> dict[str, Any]:
        if self.final is not None:
            return self.final
        return {"mode": self.mechanism,
                "limit_bytes": self.limit_bytes, "peak_bytes": self.peak(), "exceeded": self.exceeded()}

    def close(self) -> None:
        """Stop watching; in cgroup mode kill whatever is still in the cgroup and remove it."""
        if self.final is not None:
            return
        _watcher().remove(self)
        if self.mode == "watch":
            self.final = self.record()
            return
        if self.cgroup is None or not self.cgroup.exists():
            return
        self.final = self.record()
        if not _empty_and_remove(self.cgroup, self.version):
            _LEFT_BEHIND.append((self.cgroup, self.version))  # retried when the evaluator exits


_LEFT_BEHIND: list[tuple[Path, int]] = []


@atexit.register
def _remove_left_behind() -> None:
    for cgroup, version in _LEFT_BEHIND:
        _empty_and_remove(cgroup, version, wait_s=10.0)


def for_child(mode: str, memory_bytes: int | None, area_fds: tuple[int, ...] = (),
              child_written_fds: tuple[int, ...] = ()) -> TreeMemoryCap | None:
    """The cap for a child whose own memory may be ``memory_bytes`` (None: no cap) beside its transport areas
    ``area_fds`` (areas handed over later: ``TreeMemoryCap.add_areas``)."""
    if memory_bytes is None:
        return None
    resolved = resolve_mode(mode)
    if resolved == "cgroup":
        try:
            return TreeMemoryCap("cgroup", int(memory_bytes) + _area_allowance("cgroup", area_fds, child_written_fds),
                                 exempt_fds=area_fds)
        except OSError as e:
            if mode == "cgroup":
                raise MemoryCapUnavailable(f"memory_cap=cgroup: could not make a memory cgroup: {e}") from None
            _warn_once(f"host memory cap by polling: a memory cgroup could not be made ({e})")
    return TreeMemoryCap("watch", int(memory_bytes) + _area_allowance("watch", area_fds, child_written_fds),
                         exempt_fds=area_fds)


def _area_allowance(mode: str, area_fds: tuple[int, ...], child_written_fds: tuple[int, ...]) -> int:
    """What a tree's cap allows for its transport areas. A cgroup is charged only for the pages its processes touch
    first: of the areas, those the child may touch before the trusted side does (``child_written_fds``: its output
    area, and on CUDA its secret-input area, which both sides page-lock at once; the trusted side wrote every sealed
    area before handing it over). Polling sees every mapped area page: it allows for all of them."""
    total = 0
    for fd in child_written_fds if mode == "cgroup" else area_fds:
        try:
            total += os.fstat(fd).st_size
        except OSError:
            pass
    return total


def _inodes(fds: tuple[int, ...]) -> frozenset[tuple[int, int]]:
    out = set()
    for fd in fds:
        try:
            st = os.fstat(fd)
            out.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    return frozenset(out)


def _limit_files(version: int) -> tuple[str, ...]:
    return ("memory.max",) if version == 2 else ("memory.limit_in_bytes",)


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / (1 << 30):.2f} GiB"


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


def _read_key(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return -1


# -- watch mode ----------------------------------------------------------------------------------------------------

_SHARED_PREFIXES = (b"/memfd:", b"/dev/shm/", b"/SYSV")


def tree_usage(root_pid: int, exempt: frozenset[tuple[int, int]] = frozenset()) -> int:
    """Bytes the process tree under ``root_pid`` holds: resident anonymous and shared pages of every process, plus
    the allocated size of every memfd, /dev/shm file or SysV segment held open or mapped (each once: a memfd filled
    with ``write``, mapped by one page and closed is in no fd table and barely in RSS), ``exempt`` files (dev,
    inode) aside. /proc is read as bytes: a process name (``PR_SET_NAME``) is not necessarily UTF-8."""
    try:
        procs = [psutil.Process(root_pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return 0
    total, seen = 0, set(exempt)

    def add_file(path: str) -> None:
        nonlocal total
        try:
            st = os.stat(path)
        except OSError:
            return
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512

    for p in procs:
        try:
            status = Path(f"/proc/{p.pid}/status").read_bytes()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith((b"RssAnon:", b"RssShmem:")):
                total += int(line.split()[1]) * 1024
        fd_dir = f"/proc/{p.pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd).encode())
            except OSError:
                continue
            if target.startswith(_SHARED_PREFIXES):
                add_file(os.path.join(fd_dir, fd))
        try:
            maps = Path(f"/proc/{p.pid}/maps").read_bytes()
        except OSError:
            continue
        for line in maps.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith(_SHARED_PREFIXES):
                add_file(f"/proc/{p.pid}/map_files/{parts[0].decode()}")
    return total


class _Watcher:
    """One thread polls every watched tree (``TreeMemoryCap`` in watch mode) and kills those over their cap."""

    def __init__(self) -> None:
        self.caps: list[TreeMemoryCap] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, name="kb-memory-watch", daemon=True)
        self.thread.start()

    def add(self, cap: TreeMemoryCap) -> None:
        with self.lock:
            self.caps.append(cap)

    def remove(self, cap: TreeMemoryCap) -> None:
        with self.lock:
            if cap in self.caps:
                self.caps.remove(cap)

    def run(self) -> None:
        while True:
            # Checks run under the lock: once remove() returned, the watcher never touches that tree (its pid may
            # be reaped and reused).
            # Between timed trials only (timing.TRIAL_GATE: a poll is milliseconds of Python that would otherwise
            # land inside the trusted side's reference windows); a trial defers a poll by at most its own length.
            with TRIAL_GATE, self.lock:
                self.check_all()
            time.sleep(POLL_S)

    def check_all(self) -> None:
        for cap in self.caps:
            if cap.pid is None or cap.killed:
                continue
            try:
                self.check(cap)
            except Exception as e:  # noqa: BLE001 - the one thread must outlive any one tree's odd /proc state
                # A tree that cannot be measured is not trusted to stay under its cap.
                print(f"WARNING: evaluation sandbox: memory watch of pid {cap.pid} failed "
                      f"({type(e).__name__}: {e}); killing its tree", file=sys.stderr)
                cap.failure = f"{type(e).__name__}: {e}"
                cap.kill_tree()

    @staticmethod
    def check(cap: TreeMemoryCap) -> None:
        if cap.mode == "watch":
            used = tree_usage(cap.pid, cap._exempt)
            cap.peak_bytes = max(cap.peak_bytes, used)
            if used > cap.limit_bytes:
                cap.exceeded_bytes = used
                cap.kill_tree()
        elif cap.exceeded():
            cap.kill_tree()


_WATCHER: list[_Watcher] = []


def _watcher() -> _Watcher:
    with _LOCK:
        if not _WATCHER:
            _WATCHER.append(_Watcher())
        return _WATCHER[0]
