"""Parent side of an evaluation child: spawning, confining and driving it (trust model in
``workflow_scripts.evaluation.child``).

``ChildProcess`` starts ``python -m workflow_scripts.evaluation.child`` (a fresh interpreter, never a fork) in its
own session, with a scrubbed environment (``HOME``, ``TMPDIR`` and ``TRITON_CACHE_DIR`` inside its working
directory) and the resource limits of ``Limits`` (applied by the child itself, ``apply_rlimits``, before torch is
imported), inside the OS sandbox that ``sandbox_command`` builds (the one place that does):

* ``bwrap`` (the full level): a small first stage (``unshare --user --map-root-user --mount`` and ``STAGE1``)
  mounts the child's private temporary directory, a tmpfs with a size and an inode cap, over its working
  directory; then bubblewrap runs the child in new user, PID, network, IPC, UTS and cgroup namespaces as uid
  65534 with no capabilities, the whole file system read-only (``--ro-bind / /``), a minimal read-only ``/dev``
  with only the GPU device nodes (``/dev/nvidia*``), a fresh ``/proc`` of its own PID namespace,
  ``--die-with-parent`` and ``--new-session``. When the child exits or is killed, the PID namespace dies and every
  process the answer started dies with it.
* ``unshare`` (a weaker level, for hosts without bubblewrap): ``unshare`` alone gives new user, mount, PID (with
  ``--kill-child``), network, IPC and UTS namespaces; ``STAGE1`` builds a ``/dev`` of the needed nodes, remounts every
  mount read-only, mounts the capped tmpfs, and ``setpriv`` drops every capability (the child stays uid 0 of its user
  namespace).

At both levels ``STAGE1`` also hides the folders ``ChildProcess.hidden`` names (an answer's problem sources:
``problem_sources``, filtered by ``hideable``) behind empty read-only tmpfs mounts.
* ``none``: no sandbox (only the session, the scrubbed environment and the rlimits), said loudly.

Which level is in force is measured once per process by running the same command line with a probe
(``Isolation``), and recorded in every result. Files the parent puts into the working directory after the child
started (the answer) reach it through ``in/``, a read-only view of the host directory inside the tmpfs.

Commands go to the child's stdin as JSON lines; results come back over the authenticated channel
(``workflow_scripts.evaluation.channel``). ``kill`` kills the child's whole process group (with a PID namespace,
everything the answer started).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from workflow_scripts.evaluation import memory_cap
from workflow_scripts.evaluation.channel import ChannelReader, ChildDied, Message

REPO_ROOT = Path(__file__).resolve().parents[2]  # on the child's PYTHONPATH
CHILD_MODULE = "workflow_scripts.evaluation.child"  # what the child runs (python -m)
SANDBOX_UID = 65534  # "nobody": the child's uid inside the bubblewrap sandbox
ISOLATION_MODES = ("auto", "bwrap", "unshare", "none")
BWRAP_ENV = "KB_BWRAP"  # a bubblewrap binary to use (a host without it on PATH), below the ``bwrap`` config key
INBOX = "in"  # inside the private directory: the read-only view of the host's working directory

_ENV_PASSTHROUGH = (
    "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
    # Keep NVLink multicast off where the host asks for it (NCCL/PyTorch/NVSHMEM).
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
)

# First stage, run as root of a fresh user namespace in a fresh mount namespace (nothing of it is visible to the
# host). Arguments: work dir, tmpfs size, inode cap, level, gpu (1: bind /dev/nvidia*), the directories to hide (one
# per line: each gets an empty read-only tmpfs over it); then the command to exec. The host directory stays
# reachable as "." after the tmpfs hides it: its files are copied in (the Triton cache template) and it is bound
# read-only at in/ (the answer, copied there after the child started). Under bubblewrap the hidden directories
# stay hidden: its read-only bind of / takes this namespace's mounts with it.
STAGE1 = r"""set -eu
wd=$1 size=$2 inodes=$3 level=$4 gpu=$5 hidden=$6
shift 6
cd "$wd"
printf '%s\n' "$hidden" | while IFS= read -r p; do
  [ -n "$p" ] && [ -d "$p" ] || continue
  mount -t tmpfs -o size=4k,nr_inodes=16,mode=0555 kbhidden "$p"
  mount -o remount,bind,ro "$p"
done
if [ "$level" = unshare ]; then
  mount -t tmpfs -o size=1m,nr_inodes=512,mode=0755 kbdev "$wd"
  for p in /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/nvidia*; do
    [ -e "$p" ] || continue
    case "$p" in /dev/nvidia*) [ "$gpu" = 1 ] || continue ;; esac
    n=${p#/dev/}
    if [ -d "$p" ]; then mkdir "$wd/$n"; mount --rbind "$p" "$wd/$n"
    else : > "$wd/$n"; mount --bind "$p" "$wd/$n"; fi
  done
  mkdir "$wd/shm" "$wd/pts"
  ln -s /proc/self/fd "$wd/fd"; ln -s /proc/self/fd/0 "$wd/stdin"
  ln -s /proc/self/fd/1 "$wd/stdout"; ln -s /proc/self/fd/2 "$wd/stderr"
  mount --move "$wd" /dev
  # Every mount read-only, keeping its other (possibly locked) flags; but not /proc (CUDA fails to initialise on
  # a read-only /proc, seen on the H200): its host-wide knobs are made read-only instead, as bubblewrap does.
  while read -r _ _ _ _ mp opts _; do
    case "$mp" in /proc | /proc/*) continue ;; esac
    case "$opts" in rw,*) o="ro,${opts#rw,}" ;; rw) o=ro ;; *) continue ;; esac
    mount -o "remount,bind,$o" "$mp" 2>/dev/null || true
  done < /proc/self/mountinfo
  for p in /proc/sys /proc/sysrq-trigger /proc/irq /proc/bus; do
    [ -e "$p" ] || continue
    mount --bind "$p" "$p"
    mount -o remount,bind,ro "$p"
  done
fi
mount -t tmpfs -o "size=$size,nr_inodes=$inodes,mode=0700" kbwork "$wd"
cp -a . "$wd"/
mkdir "$wd/in"
mount --no-canonicalize --bind . "$wd/in"  # ".": the hidden host directory (cwd)
mount -o remount,bind,ro "$wd/in"
cd "$wd"
unset PWD OLDPWD  # the child's environment is exactly the one ChildProcess.env built
exec "$@"
"""


@dataclass
class Limits:
    nofile: int = 4096
    fsize_bytes: int = 1 << 30  # any one file (logs included); the answer's prints cannot fill the disk
    as_bytes: int | None = None  # CPU only: CUDA reserves huge virtual ranges
    cpu_seconds: int | None = None  # RLIMIT_CPU: a backstop behind the parent's wall-clock timeout
    nproc: int | None = 512  # RLIMIT_NPROC (threads too), set only inside a user namespace (see apply_rlimits)
    tmp_bytes: int = 2 << 30  # the private tmpfs (sandboxed levels)
    tmp_inodes: int = 32768
    # The host-memory cap on the child's whole process tree beside its transport areas (memory_cap.py); None: none.
    memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def apply_rlimits(limits: dict[str, Any], user_namespace: bool = False) -> None:
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
    if limits.get("cpu_seconds"):
        setl(resource.RLIMIT_CPU, int(limits["cpu_seconds"]))
    # Linux >= 5.14 counts RLIMIT_NPROC per user namespace; outside one (or older) it would count every process of
    # the host user. The kernel never enforces it for host uid 0.
    if limits.get("nproc") and user_namespace and _kernel_at_least(5, 14):
        setl(resource.RLIMIT_NPROC, int(limits["nproc"]))


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        parts = os.uname().release.split(".")
        return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (major, minor)
    except (ValueError, IndexError):
        return False


@dataclass(frozen=True)
class Isolation:
    """The isolation in force around a child, as measured from inside by the probe (``probe_isolation``), recorded
    in every result (``protocol.isolation``)."""

    tool: str  # "bwrap" | "unshare" | "none"
    level: str  # "full" | "weaker" | "none"
    binary: str | None = None  # the bubblewrap (or unshare) binary used
    pid_namespace: bool = False  # the child's own PID namespace: nothing it starts outlives it; no host process visible
    user_namespace: bool = False
    ipc_namespace: bool = False  # SysV IPC and POSIX message queues of its own (they die with it)
    uid: int | None = None  # inside
    host_uid: int | None = None  # the evaluator's (what the child's files are owned as on the host)
    capabilities: bool = True  # any effective capability left in the child
    readonly_root: bool = False  # the repository, the interpreter, / and the host /tmp read-only inside (tried)
    private_tmp: dict[str, int] | None = None  # {"bytes", "inodes"} of the tmpfs working directory
    network: bool = False  # True: a network namespace of its own (loopback only)
    devices: str = "host"  # "minimal" (null, zero, random, tty and the GPU nodes) | "host"
    host_memory: str | None = None  # the cap on the tree's host memory: "cgroup_v2" | "cgroup_v1" | "watch" | None
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["warnings"] = list(self.warnings)
        return d

    @property
    def sandboxed(self) -> bool:
        return self.tool != "none"


def none_isolation(*reasons: str) -> Isolation:
    return Isolation(tool="none", level="none", host_uid=os.geteuid(), warnings=tuple(reasons))


def find_bwrap(configured: str | None = None) -> str | None:
    """The bubblewrap binary: the ``bwrap`` config key, else ``$KB_BWRAP``, else ``bwrap`` on PATH."""
    for cand in (configured, os.environ.get(BWRAP_ENV)):
        if cand:
            return cand if os.access(cand, os.X_OK) else None
    return shutil.which("bwrap")


def _gpu_nodes() -> list[str]:
    d = Path("/dev")
    return sorted(str(p) for p in d.glob("nvidia*")) if d.is_dir() else []


def sandbox_command(tool: str, workdir: Path, limits: Limits, device: str, bwrap: str | None = None,
                    hidden: tuple[str, ...] = ()) -> list[str]:
    """The command prefix that runs a child inside the sandbox ``tool`` ("bwrap" | "unshare" | "none") with
    ``workdir`` as its private temporary directory and the directories ``hidden`` (see ``hideable``) empty. The only
    place the sandbox's command line is built."""
    if tool == "none":
        return []
    unshare = shutil.which("unshare") or "unshare"
    wd = str(workdir)
    stage1 = ["/bin/sh", "-c", STAGE1, "kbsandbox", wd, str(limits.tmp_bytes), str(limits.tmp_inodes), tool,
              "1" if device == "cuda" else "0", "\n".join(hidden)]
    if tool == "bwrap":
        assert bwrap is not None
        devs: list[str] = []
        if device == "cuda":
            for node in _gpu_nodes():  # /dev/nvidia0..N, nvidiactl, nvidia-uvm(-tools), nvidia-modeset, nvidia-caps
                devs += ["--dev-bind-try", node, node]
        return ([unshare, "--user", "--map-root-user", "--mount", "--"] + stage1 + [
            bwrap, "--ro-bind", "/", "/", "--dev", "/dev", *devs, "--remount-ro", "/dev", "--proc", "/proc",
            "--bind", wd, wd, "--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_UID), "--cap-drop", "ALL", "--hostname", "kbeval", "--die-with-parent",
            "--new-session", "--chdir", wd, "--",
            # bubblewrap always sets PWD; the child's environment is exactly the one ChildProcess.env built
            shutil.which("env") or "/usr/bin/env", "-u", "PWD"])
    if tool == "unshare":
        setpriv = shutil.which("setpriv")
        # setpriv: the unshare process dies with the evaluator (its child dies with it: --kill-child) and the child
        # keeps no capability (it cannot undo the read-only remounts).
        outer = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
        drop = [setpriv, "--bounding-set", "-all", "--inh-caps", "-all", "--no-new-privs", "--"] if setpriv else []
        # --ipc: SysV segments and POSIX message queues die with the child (in the host's IPC namespace a segment
        # outlives its process); --uts: its own hostname.
        return (outer + [unshare, "--user", "--map-root-user", "--mount", "--net", "--ipc", "--uts", "--pid", "--fork",
                         "--kill-child", "--mount-proc", "--"] + stage1 + drop)
    raise ValueError(f"unknown sandbox tool {tool!r}")


def _needed_paths(workdir: Path) -> list[Path]:
    """What a child cannot run without: the interpreter's installation, the harness's package, its own directory."""
    import sysconfig

    paths = [REPO_ROOT / "workflow_scripts", Path(workdir)]
    paths += [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable)]
    paths += [Path(p) for p in sysconfig.get_paths().values()]
    return [p.resolve() for p in paths if p]


def hideable(dirs: list[Path], workdir: Path) -> tuple[str, ...]:
    """The directories of ``dirs`` that can be hidden from a child: existing ones that hold nothing it needs
    (``_needed_paths``; never / itself)."""
    needed = _needed_paths(workdir)
    out: list[str] = []
    for d in dirs:
        try:
            d = Path(d).resolve()
        except OSError:
            continue
        if d.is_dir() and d != Path("/") and not any(n == d or d in n.parents for n in needed):
            out.append(str(d))
    return tuple(dict.fromkeys(out))


def problem_sources(problem: Path) -> list[Path]:
    """Where a problem's source (and its siblings', and their prompts') lies: the suite checkout when the problem
    sits in KernelBench's layout (``<suite>/KernelBench/level<N>/<id>_<name>.py``), else the problem's own folder.
    An answer that found its problem's file could rebuild the reference model under the same seed and return its
    outputs: one file would pass every problem."""
    folder = Path(problem).resolve().parent
    if folder.name.startswith("level") and folder.name[5:].isdigit() and folder.parent.name == "KernelBench":
        return [folder.parent.parent, folder]  # the folder alone where the checkout cannot be hidden
    return [folder]


# Run inside the sandbox by probe_isolation: what the child would find (argv: the host pid of the prober, the
# parent of the work dir, the namespace ids of the prober, the repository).
_PROBE = r"""
import json, os, sys
host_pid, outer, ns, repo = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
def tries_write(d):
    p = os.path.join(d, ".kb_sandbox_probe_%d" % os.getpid())
    try:
        os.mkdir(p)
    except OSError:
        return False
    os.rmdir(p)
    return True
def ns_id(kind):
    try:
        return os.readlink("/proc/self/ns/" + kind)
    except OSError:
        return None
st = open("/proc/self/status").read()
cap = int(next(l.split()[1] for l in st.splitlines() if l.startswith("CapEff:")), 16)
with open("/proc/net/dev") as f:
    ifaces = sorted(l.split(":")[0].strip() for l in f.readlines()[2:])
sv = os.statvfs(".")
private = os.stat(".").st_dev != os.stat(outer).st_dev
dev = set(os.listdir("/dev"))
print(json.dumps({
    "pid_namespace": ns_id("pid") != ns["pid"] and not os.path.exists("/proc/%d" % host_pid),
    "user_namespace": ns_id("user") != ns["user"],
    "ipc_namespace": ns_id("ipc") != ns["ipc"],
    "uid": os.getuid(), "capabilities": cap != 0,
    "readonly_root": not any(tries_write(d) for d in (repo, sys.prefix, "/", "/tmp", outer)),
    "private_tmp": {"bytes": sv.f_blocks * sv.f_frsize, "inodes": sv.f_files} if private else None,
    "network": ns_id("net") != ns["net"] and ifaces == ["lo"],
    "devices": "minimal" if not (dev & {"sda", "vda", "nvme0", "nvme0n1", "mem", "kmsg", "loop0"}) else "host",
}))
"""

_PROBED: dict[tuple[Any, ...], Isolation] = {}
_PROBE_LOCK = threading.Lock()


def _probe(tool: str, limits: Limits, device: str, bwrap: str | None) -> tuple[dict[str, Any] | None, str]:
    """(measurements, "") from a probe run inside ``tool``'s sandbox, or (None, why it failed)."""
    base = Path(tempfile.mkdtemp(prefix="kbprobe-"))
    try:
        work = base / "work"
        work.mkdir()
        ns = {k: os.readlink(f"/proc/self/ns/{k}") for k in ("pid", "user", "net", "ipc")}
        cmd = sandbox_command(tool, work, limits, device, bwrap) + [
            sys.executable, "-I", "-c", _PROBE, str(os.getpid()), str(base), json.dumps(ns), str(REPO_ROOT)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=work, start_new_session=True)
        except (OSError, subprocess.SubprocessError) as e:
            return None, f"{tool}: {type(e).__name__}: {e}"
        if p.returncode != 0:
            return None, f"{tool} failed (exit {p.returncode}): {p.stderr.strip()[-400:]}"
        try:
            return json.loads(p.stdout.strip().splitlines()[-1]), ""
        except (ValueError, IndexError):
            return None, f"{tool}: unreadable probe output {p.stdout[-200:]!r}"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _measured(tool: str, binary: str | None, m: dict[str, Any], notes: list[str]) -> Isolation:
    iso = Isolation(tool=tool, level="none", binary=binary, host_uid=os.geteuid(), warnings=tuple(notes), **m)
    full = (iso.pid_namespace and iso.user_namespace and iso.ipc_namespace and iso.uid != 0 and not iso.capabilities
            and iso.readonly_root and iso.private_tmp is not None and iso.network and iso.devices == "minimal")
    level = "full" if (tool == "bwrap" and full) else "weaker"
    missing = [k for k in ("pid_namespace", "user_namespace", "ipc_namespace", "readonly_root", "network")
               if not m.get(k)]
    missing += ["capabilities"] if iso.capabilities else []
    missing += ["private_tmp"] if iso.private_tmp is None else []
    if missing:
        notes = notes + [f"{tool}: not achieved: {', '.join(missing)}"]
    return dataclasses.replace(iso, level=level, warnings=tuple(notes))


class SandboxUnavailable(RuntimeError):
    """The configured sandbox cannot be set up on this host."""


def probe_isolation(mode: str, limits: Limits, device: str, bwrap: str | None = None) -> Isolation:
    """The isolation a child started with ``mode`` gets here (probed once per process and configuration).
    "auto": bubblewrap where it works, else unshare, else none, with a loud warning for anything less than full.
    "bwrap" / "unshare": that tool or ``SandboxUnavailable``. "none": no sandbox."""
    if mode not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {mode!r}")
    if mode == "none":
        return none_isolation("isolation=none: no OS sandbox (configured)")
    binary = find_bwrap(bwrap)
    key = (mode, binary, limits.tmp_bytes, limits.tmp_inodes, device)
    with _PROBE_LOCK:
        if key in _PROBED:
            return _PROBED[key]
        notes: list[str] = []
        iso: Isolation | None = None
        for tool in (("bwrap", "unshare") if mode == "auto" else (mode,)):
            if tool == "bwrap" and binary is None:
                notes.append(f"bwrap: not found (install bubblewrap, or point the bwrap config key or ${BWRAP_ENV} "
                             "at a binary)")
                continue
            if not shutil.which("unshare"):
                notes.append(f"{tool}: util-linux unshare not found")
                continue
            m, why = _probe(tool, limits, device, binary if tool == "bwrap" else None)
            if m is None:
                notes.append(why)
                continue
            iso = _measured(tool, binary if tool == "bwrap" else shutil.which("unshare"), m, notes)
            break
        if iso is None:
            if mode != "auto":
                raise SandboxUnavailable("; ".join(notes))
            iso = none_isolation(*notes, "no OS sandbox could be set up: answers run unconfined")
        if iso.level != "full":
            msg = (f"evaluation sandbox: {iso.tool} ({iso.level} isolation)"
                   + (": " + "; ".join(iso.warnings) if iso.warnings else ""))
            print(f"WARNING: {msg}", file=sys.stderr)
            warnings.warn(msg, RuntimeWarning, stacklevel=2)
        _PROBED[key] = iso
        return iso


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
    bwrap: str | None = None  # a bubblewrap binary (default: $KB_BWRAP, then PATH)
    hidden: tuple[str, ...] = ()  # directories the child finds empty (sandboxed levels; see hideable)
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
    def network_isolation(self) -> bool:
        """Kept for older readers: a network namespace of its own."""
        return bool(self.sandbox and self.sandbox.network)

    @property
    def areas_delivered(self) -> bool:
        """Its memory areas have been handed over (``deliver_areas``), or it takes none."""
        return not self.areas_later or (self.proc is not None and self._area_socket is None)

    @property
    def killed(self) -> bool:
        return self._killed

    @property
    def inbox(self) -> Path:
        """Where, inside the child, it finds the files the parent puts into ``workdir`` (live, read-only)."""
        return self.workdir / INBOX if self.sandbox and self.sandbox.sandboxed else self.workdir

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
        key = secrets.token_bytes(32)
        rfd = wfd = -1
        theirs: socket.socket | None = None
        try:
            rfd, wfd = os.pipe()
            inherited: tuple[int, ...] = (wfd,)
            if self.areas_later:
                self._area_socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                inherited += (theirs.fileno(),)
            prefix = sandbox_command(self.sandbox.tool, self.workdir, self.limits, self.device,
                                     self.sandbox.binary if self.sandbox.tool == "bwrap" else None, self.hidden)
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
        self.reader = ChannelReader(rfd, key)
        init = dict(self.init, role=self.role, nonce=key.hex(), fd=wfd, device=self.device,
                    limits=self.limits.to_dict(), workdir=str(self.workdir),
                    inbox=INBOX if self.sandbox.sandboxed else ".", user_namespace=self.sandbox.user_namespace)
        if theirs is not None:
            init["area_socket"] = inherited[1]  # pass_fds keeps the number
        self._write_line(init)

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
        """Next non-event message. Event messages (monitor reports) are collected in ``self.events``. Raises
        ``ChildDied`` once the channel is closed here (``kill``)."""
        if self.reader is None:
            raise ChildDied("result channel closed")
        while True:
            try:
                msg = self.reader.recv(deadline)
            except ChildDied:
                self.wait(5.0)
                raise
            if msg.type == "event" and keep_events:
                if len(self.events) < self.MAX_EVENTS:
                    self.events.append(msg.header)
                continue
            return msg

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
