"""The OS sandbox around an evaluation child: the command line that confines it (``sandbox_command``, the one place
that builds it) and the isolation actually in force, measured by a probe run inside the same command line
(``probe_isolation``) and recorded in every result. What an answer's child finds empty: ``confinement``.

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
* ``none``: no sandbox (only the session, the scrubbed environment and the rlimits), said loudly.

At both sandboxed levels ``STAGE1`` also covers the folders a child's ``covers`` name (for an answer: everything but
the system, the interpreter, the harness and its own folder, ``confinement.covers``) with empty read-only tmpfs
mounts. Which level is in force is measured once per process and configuration (``Isolation``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.evaluation.limits import Limits

REPO_ROOT = Path(__file__).resolve().parents[2]  # on the child's PYTHONPATH
SANDBOX_UID = 65534  # "nobody": the child's uid inside the bubblewrap sandbox
ISOLATION_MODES = ("auto", "bwrap", "unshare", "none")
BWRAP_ENV = "KB_BWRAP"  # a bubblewrap binary to use (a host without it on PATH), below the ``bwrap`` config key

# First stage, run as root of a fresh user namespace in a fresh mount namespace (nothing of it is visible to the
# host). Arguments: work dir, tmpfs size, inode cap, level, gpu (1: bind /dev/nvidia*), the covers (one per line,
# confinement.Cover.line: a folder, then the paths under it to keep, tab-separated; the folder gets an empty tmpfs
# over it, each kept path, held open on a descriptor meanwhile, is bound back into it, and all of it is made
# read-only; a file is covered by /dev/null); then the command to exec. The host directory stays reachable as "."
# after a cover or the tmpfs hides it: its files are copied in (the Triton cache template) and it is bound read-only
# at in/ (a baseline's problem, copied there after the child started). Under bubblewrap the covers stay: its
# read-only bind of / takes this namespace's mounts with it.
STAGE1 = r"""set -eu
wd=$1 size=$2 inodes=$3 level=$4 gpu=$5 hidden=$6
shift 6
cd "$wd"
tab=$(printf '\t')
printf '%s\n' "$hidden" | while IFS="$tab" read -r p k1 k2 k3 k4 k5 k6; do
  [ -n "$p" ] && [ -e "$p" ] || continue
  if [ ! -d "$p" ]; then
    mount --bind /dev/null "$p"
    mount -o remount,bind,ro "$p"
    continue
  fi
  fd=3
  for k in "$k1" "$k2" "$k3" "$k4" "$k5" "$k6"; do
    if [ -n "$k" ]; then eval "exec $fd<\"\$k\""; fi
    fd=$((fd + 1))
  done
  mount -t tmpfs -o size=1m,nr_inodes=1024,mode=0755 kbhidden "$p"
  fd=3
  for k in "$k1" "$k2" "$k3" "$k4" "$k5" "$k6"; do
    if [ -n "$k" ]; then
      if [ -d "/proc/self/fd/$fd" ]; then mkdir -p "$k"; else mkdir -p "${k%/*}"; : > "$k"; fi
      mount --no-canonicalize --bind "/proc/self/fd/$fd" "$k"
      mount -o remount,bind,ro "$k"
      eval "exec $fd<&-"
    fi
    fd=$((fd + 1))
  done
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
                    covers: tuple[Any, ...] = ()) -> list[str]:
    """The command prefix that runs a child inside the sandbox ``tool`` ("bwrap" | "unshare" | "none") with
    ``workdir`` as its private temporary directory and the folders of ``covers`` (``confinement.Cover``) empty but
    for what each keeps. The only place the sandbox's command line is built."""
    if tool == "none":
        return []
    unshare = shutil.which("unshare") or "unshare"
    wd = str(workdir)
    stage1 = ["/bin/sh", "-c", STAGE1, "kbsandbox", wd, str(limits.tmp_bytes), str(limits.tmp_inodes), tool,
              "1" if device == "cuda" else "0", "\n".join(c.line() for c in covers)]
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
