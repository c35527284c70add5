"""Can a trusted process hold another process's GPU work off while it times, without stopping that process's CPU?
(issue 34: what would let evaluations and baselines keep compiling beside another job's timing, and close the hole that
kept ``evaluation.yield_gpu`` off by default until s37: a stopped process's queued kernels still run.) A probe for the
device, not part of the pipeline.

The CUDA driver's checkpoint API (driver 550+; ``cuCheckpointProcessLock``) locks a process by pid: it "blocks further
CUDA API calls" in that process and "completes already-submitted work". This asks, on the device:
  1. ``symbols``: whether libcuda exports the calls, and the driver's version; ``non_cuda``: what it says of a process
     without CUDA state, and how fast;
  2. ``busy``: a helper runs matmuls back to back, with a CPU counter in a thread beside them; how long the lock takes,
     whether its GPU calls stop and its CPU goes on while locked, how long the unlock takes;
  3. ``queued``: the helper queued one long kernel (``torch.cuda._sleep``, about 2 s); does the lock wait for it (its
     latency near the kernel's rest), and does a lock with a 300 ms timeout fail and leave it running;
  4. ``stopped``: the helper is SIGSTOPped first; does the lock still return (the order freeze/lock matters);
  5. ``namespaced``: the helper runs under ``unshare --user --map-root-user --pid --fork`` as the evaluation sandbox's
     fallback does; does the lock find it by the host's pid;
  6. ``timing``: this process times a 4096^2 matmul with CUDA events alone, beside the busy helper, and beside the
     helper locked: does locking bring the times back to alone.
What would let an answer's own CPU work (its kernels' compiling) go on beside another job's timing, its GPU work held
(``evaluation.compile_beside_timing``), asks three more:
  7. ``self_unlock``: the busy helper, locked, calls ``cuCheckpointProcessUnlock`` on itself from a thread: does its
     own call free its GPU work (then a locked answer could run kernels into another job's timing);
  8. ``cuinit``: how long a fresh process takes from its start to its first kernel (``cuInit``, a context, a launch):
     the time a process an answer starts while held has before the watcher's 5-ms poll stops it;
  9. ``locked_compile``: the idle helper, locked, launches a Triton kernel it never compiled: how much CPU its compile
     gets through while its GPU calls are held, and whether the launch lands only after the unlock.
Writes one JSON file as it goes (a cut-off call keeps what it found).

    python3 bench/cuda_lock_probe.py --out $OUT/cuda_lock_probe.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HELPER = r"""
import sys, threading, time, torch
x = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
counts = {"cpu": 0, "gpu": 0}
def spin():
    while True:
        counts["cpu"] += 1
threading.Thread(target=spin, daemon=True).start()
def report():
    while True:
        print(f"{time.time():.4f} {counts['cpu']} {counts['gpu']}", flush=True)
        time.sleep(0.05)
print("ready", flush=True)  # before the reporter starts: its lines never interleave with this one
threading.Thread(target=report, daemon=True).start()
while sys.argv[1] == "idle":  # a context, then no CUDA call: an answer's process waiting for its next command
    time.sleep(1)
if sys.argv[1] == "queued":
    torch.cuda._sleep(int(2.0 * 1.7e9))
    print("queued", flush=True)
while True:
    y = x @ x
    torch.cuda.synchronize()
    counts["gpu"] += 1
"""


# The helper of probes 7 and 9: a context, then commands on its standard input; what it did on its standard output.
COMMANDED = r"""
import ctypes, os, sys, time, torch, triton, triton.language as tl
x = torch.zeros(1 << 20, device="cuda")
torch.cuda.synchronize()
@triton.jit
def add_one(p, n, BLOCK: tl.constexpr, SALT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(p + offs, mask=offs < n)
    tl.store(p + offs, tl.exp(tl.sin(v) * SALT) + 1.0, mask=offs < n)
print("ready", flush=True)
for line in sys.stdin:
    command = line.split()
    t0 = time.perf_counter()
    if command[0] == "unlock":  # the checkpoint call on itself, from its own (only) thread
        cuda = ctypes.CDLL("libcuda.so.1")
        rc = cuda.cuCheckpointProcessUnlock(ctypes.c_int(os.getpid()), None)
        print(f"unlocked {rc} {time.perf_counter() - t0:.4f}", flush=True)
    elif command[0] == "matmul":
        y = torch.randn(2048, 2048, device="cuda") @ torch.randn(2048, 2048, device="cuda")
        torch.cuda.synchronize()
        print(f"matmul {time.perf_counter() - t0:.4f}", flush=True)
    elif command[0] == "compile":  # a constexpr never seen: a fresh compile, then its launch
        add_one[(8,)](x, x.numel(), BLOCK=1024, SALT=float(command[1]))
        print(f"compiled_and_launched {time.perf_counter() - t0:.4f}", flush=True)
        torch.cuda.synchronize()
        print(f"done {time.perf_counter() - t0:.4f}", flush=True)
"""


def wait_ready(proc: subprocess.Popen, ready: threading.Event, timeout_s: float = 120.0) -> None:
    """Until the helper says it is ready; a helper that exits first fails the probe at once, not at the timeout."""
    deadline = time.monotonic() + timeout_s
    while not ready.wait(0.1):
        if proc.poll() is not None:
            raise RuntimeError(f"helper exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            kill_group(proc)  # a helper stuck in its start must not hold the GPU for the next probe
            raise RuntimeError("helper never became ready")


def kill_group(proc: subprocess.Popen) -> None:
    """A helper and everything it started (its own session), waited for."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class Commanded:
    """The COMMANDED helper: send a command, read its lines with their arrival times."""

    def __init__(self) -> None:
        # From a file: Triton's @jit reads its function's source, which a ``python -c`` program has none of (s41's
        # probe call: "@jit functions should be defined in a Python file", and the probe waited out its 120 s).
        script = Path(tempfile.mkdtemp(prefix="cuda_lock_probe_")) / "commanded_helper.py"
        script.write_text(COMMANDED)
        self.proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        wait_ready(self.proc, self.ready)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.perf_counter(), line.strip()))
            if line.strip() == "ready":
                self.ready.set()

    def send(self, command: str) -> float:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return time.perf_counter()

    def wait_for(self, prefix: str, timeout_s: float) -> tuple[float, str] | None:
        end = time.perf_counter() + timeout_s
        while time.perf_counter() < end:
            for when, line in self.lines:
                if line.startswith(prefix):
                    return when, line
            time.sleep(0.005)
        return None

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        kill_group(self.proc)


class Lib:
    """The checkpoint calls of libcuda, by ctypes (no CUDA context in this process for them)."""

    class LockArgs(ctypes.Structure):
        _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]

    def __init__(self) -> None:
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.cuda.cuInit(0)

    def exports(self) -> dict:
        names = ["cuCheckpointProcessLock", "cuCheckpointProcessUnlock", "cuCheckpointProcessGetState",
                 "cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore"]
        version = ctypes.c_int()
        self.cuda.cuDriverGetVersion(ctypes.byref(version))
        return {"driver_api_version": version.value, **{n: hasattr(self.cuda, n) for n in names}}

    def lock(self, pid: int, timeout_ms: int) -> tuple[int, float]:
        args = self.LockArgs(timeout_ms, 0)
        t0 = time.perf_counter()
        rc = self.cuda.cuCheckpointProcessLock(ctypes.c_int(pid), ctypes.byref(args))
        return rc, time.perf_counter() - t0

    def unlock(self, pid: int) -> tuple[int, float]:
        t0 = time.perf_counter()
        rc = self.cuda.cuCheckpointProcessUnlock(ctypes.c_int(pid), None)
        return rc, time.perf_counter() - t0

    def state(self, pid: int) -> tuple[int, int]:
        value = ctypes.c_int(-1)
        rc = self.cuda.cuCheckpointProcessGetState(ctypes.c_int(pid), ctypes.byref(value))
        return rc, value.value  # 0 running, 1 locked, 2 checkpointed, 3 failed


class Helper:
    """A helper process and its last reported counters."""

    def __init__(self, mode: str, namespaced: bool = False) -> None:
        cmd = [sys.executable, "-c", HELPER, mode]
        if namespaced:
            cmd = ["unshare", "--user", "--map-root-user", "--pid", "--fork", *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.last: tuple[float, int, int] = (0.0, 0, 0)
        self.events: list[str] = []
        self.ready = threading.Event()
        self.queued = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        wait_ready(self.proc, self.ready)
        self.pid = self._cuda_pid(namespaced)

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            if line == "ready":
                self.ready.set()
            elif line == "queued":
                self.queued.set()
            else:
                t, c, g = line.split()
                self.last = (float(t), int(c), int(g))

    def _cuda_pid(self, namespaced: bool) -> int:
        """The host's pid of the process holding the CUDA context: unshare's grandchild where namespaced."""
        pid = self.proc.pid
        if namespaced:
            for _ in range(2):
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                pid = int(children[0]) if children else pid
        return pid

    def counters_over(self, seconds: float) -> dict:
        before = self.last
        time.sleep(seconds)
        after = self.last
        return {"cpu_per_s": round((after[1] - before[1]) / seconds), "gpu_per_s": round((after[2] - before[2]) / seconds, 1)}

    def close(self) -> None:
        kill_group(self.proc)


def matmul_ms(n: int = 30) -> float:
    import torch

    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(3):
        x @ x
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        x @ x
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return round(times[len(times) // 2], 4)


def non_cuda(lib: Lib) -> dict:
    """A process without CUDA state (a shell's sleep): what the driver says of it, and how fast."""
    proc = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.1)
        t0 = time.perf_counter()
        found: dict = {"state": lib.state(proc.pid), "state_s": time.perf_counter() - t0}
        found["lock"] = lib.lock(proc.pid, 1_000)
        return found
    finally:
        proc.kill()
        proc.wait()


def busy(lib: Lib) -> dict:
    helper = Helper("busy")
    try:
        found = {"running": helper.counters_over(1.0), "state_before": lib.state(helper.pid)}
        found["lock_rc"], found["lock_s"] = lib.lock(helper.pid, 3_000)
        found["state_locked"] = lib.state(helper.pid)
        found["locked"] = helper.counters_over(2.0)
        found["unlock_rc"], found["unlock_s"] = lib.unlock(helper.pid)
        found["after_unlock"] = helper.counters_over(1.0)
        # Lock and unlock a few times: what one step-aside would cost
        cycles = []
        for _ in range(3):
            rc, s = lib.lock(helper.pid, 3_000)
            rc2, s2 = lib.unlock(helper.pid)
            cycles.append((rc, round(s * 1e3, 3), rc2, round(s2 * 1e3, 3)))
        found["cycles_ms"] = cycles
        return found
    finally:
        helper.close()


def idle(lib: Lib) -> dict:
    helper = Helper("idle")
    try:
        cycles = []
        for _ in range(3):
            rc, s = lib.lock(helper.pid, 3_000)
            rc2, s2 = lib.unlock(helper.pid)
            cycles.append((rc, round(s * 1e3, 3), rc2, round(s2 * 1e3, 3)))
        return {"cycles_ms": cycles, "cpu_goes_on": helper.counters_over(0.5)}
    finally:
        helper.close()


def queued(lib: Lib) -> dict:
    found: dict = {}
    helper = Helper("queued")
    try:
        helper.queued.wait(30)
        time.sleep(0.2)
        found["timeout_300ms"] = lib.lock(helper.pid, 300)
        found["state_after_timeout"] = lib.state(helper.pid)
        found["lock_rc"], found["lock_s"] = lib.lock(helper.pid, 5_000)
        found["unlock"] = lib.unlock(helper.pid)
    finally:
        helper.close()
    return found


def stopped(lib: Lib) -> dict:
    helper = Helper("busy")
    try:
        os.kill(helper.pid, signal.SIGSTOP)
        time.sleep(0.2)
        found = {"lock_while_stopped": lib.lock(helper.pid, 3_000), "state": lib.state(helper.pid)}
        os.kill(helper.pid, signal.SIGCONT)
        if found["state"][1] == 1:
            found["unlock"] = lib.unlock(helper.pid)
        # The other order: lock, then stop, then resume and unlock
        found["lock_then_stop"] = lib.lock(helper.pid, 3_000)
        os.kill(helper.pid, signal.SIGSTOP)
        time.sleep(0.5)
        os.kill(helper.pid, signal.SIGCONT)
        found["unlock_after_resume"] = lib.unlock(helper.pid)
        found["after"] = helper.counters_over(1.0)
        return found
    finally:
        helper.close()


def namespaced(lib: Lib) -> dict:
    helper = Helper("busy", namespaced=True)
    try:
        found = {"host_pid": helper.pid, "state": lib.state(helper.pid)}
        found["lock"] = lib.lock(helper.pid, 3_000)
        found["locked"] = helper.counters_over(1.0)
        found["unlock"] = lib.unlock(helper.pid)
        found["after"] = helper.counters_over(1.0)
        return found
    finally:
        helper.close()


def timing(lib: Lib) -> dict:
    found = {"alone_ms": matmul_ms()}
    helper = Helper("busy")
    try:
        found["beside_busy_ms"] = matmul_ms()
        found["lock"] = lib.lock(helper.pid, 3_000)
        found["beside_locked_ms"] = matmul_ms()
        found["unlock"] = lib.unlock(helper.pid)
        found["beside_busy_again_ms"] = matmul_ms()
    finally:
        helper.close()
    return found


def self_unlock(lib: Lib) -> dict:
    """Locked, does the process free itself? Its matmul must not finish while it is locked by this side."""
    helper = Commanded()
    try:
        found: dict = {"lock": lib.lock(helper.proc.pid, 3_000)}
        sent = helper.send("unlock")
        reply = helper.wait_for("unlocked", 5.0)
        found["self_unlock_reply"] = None if reply is None else (reply[1], round(reply[0] - sent, 4))
        found["state_after_self_unlock"] = lib.state(helper.proc.pid)
        sent = helper.send("matmul")
        done = helper.wait_for("matmul", 3.0)
        found["matmul_while_locked_s"] = None if done is None else round(done[0] - sent, 4)
        found["unlock"] = lib.unlock(helper.proc.pid)
        done = helper.wait_for("matmul", 10.0)
        found["matmul_after_unlock_s"] = None if done is None else round(done[0] - sent, 4)
        found["lines"] = [line for _, line in helper.lines]
        return found
    finally:
        helper.close()


CUINIT = r"""
import ctypes, sys, time
t0 = time.perf_counter()
cuda = ctypes.CDLL("libcuda.so.1")
rc = cuda.cuInit(0)
t1 = time.perf_counter()
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
cuda.cuDeviceGet(ctypes.byref(dev), 0)
rc2 = cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
t2 = time.perf_counter()
print(f"{rc} {rc2} {t1 - t0:.4f} {t2 - t0:.4f}")
"""


def cuinit(lib: Lib) -> dict:
    """From a fresh process's start (after Python's own) to cuInit done and to a context made, three times."""
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", CUINIT], capture_output=True, text=True, timeout=60).stdout.split()
        runs.append({"cuinit_rc": int(out[0]), "ctx_rc": int(out[1]), "cuinit_s": float(out[2]),
                     "context_s": float(out[3])})
    return {"runs": runs}


def locked_compile(lib: Lib) -> dict:
    """The helper compiles a new Triton kernel while locked: its CPU seconds meanwhile, and when the launch lands; then
    the same unlocked, for the compile's own CPU time."""
    helper = Commanded()
    try:
        found: dict = {}
        cpu0 = helper.cpu_s()
        sent = helper.send("compile 1.5")
        done = helper.wait_for("done", 60.0)
        found["unlocked_compile"] = {"done_s": None if done is None else round(done[0] - sent, 3),
                                     "cpu_s": round(helper.cpu_s() - cpu0, 3)}
        found["lock"] = lib.lock(helper.proc.pid, 3_000)
        cpu0 = helper.cpu_s()
        sent = helper.send("compile 2.5")
        time.sleep(4.0)
        found["locked_4s"] = {"cpu_s": round(helper.cpu_s() - cpu0, 3),
                              "lines_while_locked": [line for when, line in helper.lines if when > sent]}
        unlocked_at = time.perf_counter()
        found["unlock"] = lib.unlock(helper.proc.pid)
        done = helper.wait_for("done", 60.0)
        found["after_unlock"] = {"done_after_unlock_s": None if done is None else round(done[0] - unlocked_at, 3),
                                 "cpu_s_total": round(helper.cpu_s() - cpu0, 3)}
        found["lines"] = [line for _, line in helper.lines]
        return found
    finally:
        helper.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", help="these probes alone")
    args = parser.parse_args()
    out = args.out
    found: dict = {}
    lib = Lib()
    found["symbols"] = lib.exports()
    out.write_text(json.dumps(found, indent=1))
    for name, probe in (("non_cuda", non_cuda), ("busy", busy), ("idle", idle), ("queued", queued), ("stopped", stopped), ("namespaced", namespaced),
                        ("timing", timing), ("self_unlock", self_unlock), ("cuinit", cuinit),
                        ("locked_compile", locked_compile)):
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        try:
            found[name] = probe(lib)
        except Exception as e:  # noqa: BLE001 - a probe that fails says how, and the next one still runs
            found[name] = {"error": repr(e)}
        found[name]["probe_s"] = round(time.perf_counter() - t0, 2)
        out.write_text(json.dumps(found, indent=1, default=str))
        print(name, json.dumps(found[name], default=str), flush=True)


if __name__ == "__main__":
    main()
