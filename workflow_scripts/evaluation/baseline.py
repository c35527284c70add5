"""PyTorch baselines per problem: eager and ``torch.compile(mode="max-autotune", backend="inductor")``.

Each baseline runs in its own child process (``workflow_scripts.evaluation.child``, role ``baseline``; same
isolation, environment scrubbing and timeout handling as answers, without the answer monitors since the reference
code is trusted), so a crash, a hang or a CUDA error in one never affects the other or the caller. Both are timed
with the same :class:`workflow_scripts.evaluation.timing.TimingProtocol` as answers (same warm-up, discarded first
trial, trial count, L2 flush, ``torch.no_grad()``, output scrubbing between calls). Baselines are timed on
KernelBench's seed-42 inputs.

GPU: the job holds its GPU shared and yielding (``gpu_lock.YieldingLease``: while a timing job waits, the child's
GPU work is held by the driver's lock while its CPU work goes on, ``baselines.compile_beside_timing``, or the whole
child is held stopped; the timer goes first) and exclusively only while something is timed (``baseline_windows``): the
eager timing and the compiled module's timing. Inductor's autotuning benchmarks during its first call run with the GPU
alone (``baselines.autotune_alone``, the default) or in the job's GPU turn (no timing beside them). Loading,
building inputs, tracing, code generation and Triton compilation run beside other jobs' correctness work, and (where
the driver can lock) beside their timing.

Compile: ``torch._dynamo.reset()`` first; the first call (tracing + Inductor code generation + autotuning) is
timed separately as ``compile_time_s`` (less the waits for exclusive windows and the time the child was held
stopped; the seconds it compiled on with its GPU work held stay in, ``phases_s.gpu_held_s``, though a CUDA call of
its meanwhile waited for the lock) and is not part of ``compile_stats``.
On CPU Inductor generates C++ (``compile_backend = "inductor-cpp"``), on CUDA Triton kernels (``"inductor"``). A
failing baseline records its status (``"error: ..."``, ``"timeout"``, ``"crash: ..."``) and the problem stays in every
table; its speedup is null. ``compile_max_abs_diff_vs_eager`` records how far the compiled output is from eager on the
timing inputs.

CLI: ``python -m workflow_scripts baseline --problem P.py --device cpu|cuda --out OUT.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.core.records import TIMING_MODES, headline_ms
from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.intervals import covered_seconds
from workflow_scripts.evaluation import compile_cache, environment, freezer, gpu_lock, resources, timeline, timing
from workflow_scripts.evaluation.baseline_windows import DONE, GRANT, REQUEST, ExclusiveWindows
from workflow_scripts.evaluation.channel import ChildDied, ChildTimeout, Message, ProtocolError
from workflow_scripts.evaluation.config import BaselineConfig
from workflow_scripts.evaluation.records import BaselineResult
from workflow_scripts.evaluation.sandbox import ChildProcess

# The longest the parent waits for a message in one go: between waits it closes an autotune window whose linger is
# over and reads the deadline again (it moves while the job waits for its GPU or holds its child stopped).
RECV_SLICE_S = 0.5


@dataclass
class _Run:
    """One baseline child driven under the job's lease: its messages read by its deadline (the seconds the job waited
    for an exclusive window or held the child stopped come on top: they are no time of the child's), its requests for
    autotune windows answered on the way (``baseline_windows``)."""

    child: ChildProcess
    yielding_lease: gpu_lock.YieldingLease | None
    windows: ExclusiveWindows
    timeout_s: float
    started: float = 0.0  # monotonic
    waited_s: float = 0.0  # for exclusive windows
    frozen_before: float = 0.0  # the lease's frozen_s when the child started
    held_before: float = 0.0  # the lease's gpu_held_s then

    def start(self) -> None:
        """The child started while the lease is held, and followed from then on (stopped whenever the lease steps
        aside)."""
        if self.yielding_lease is None:
            self.child.start()
        else:
            with self.yielding_lease.held():
                self.child.start()
                assert self.child.proc is not None
                self.yielding_lease.follow(self.child.proc.pid)
                self.frozen_before = self.yielding_lease.frozen_s
                self.held_before = self.yielding_lease.gpu_held_s
        self.started = time.monotonic()

    def frozen_s(self) -> float:
        """Seconds the child was held stopped, or (compile_beside_timing) ran with its GPU work held, while the lease
        stepped aside: its deadline moves by them."""
        return self.yielding_lease.frozen_s - self.frozen_before if self.yielding_lease is not None else 0.0

    def gpu_held_s(self) -> float:
        """Of ``frozen_s``: the seconds the child ran on with only its GPU work held."""
        return self.yielding_lease.gpu_held_s - self.held_before if self.yielding_lease is not None else 0.0

    def deadline(self) -> float:
        return self.started + self.timeout_s + self.waited_s + self.frozen_s()

    def left(self) -> float:
        """What an upgrade may wait: the time left, at least a second (as an evaluation's upgrade)."""
        return max(1.0, self.deadline() - time.monotonic())

    def recv(self) -> Message:
        """The child's next message but for its window requests, which are answered here."""
        while True:
            m = self._next()
            if m.type == REQUEST:
                self.waited_s += self.windows.benchmark(self.left(), bool(m.header.get("whole_first_call")))
                self.child.send(GRANT, deadline=self.deadline())
            elif m.type == DONE:
                self.windows.benchmark_done()
            else:
                if not self.windows.users:  # the benchmarks are over: their window closes now
                    self.windows.close()
                return m

    def _next(self) -> Message:
        while True:
            linger = self.windows.linger_left()
            if self.child.readable(RECV_SLICE_S if linger is None else min(linger, RECV_SLICE_S)):
                return self.child.recv(self.deadline())
            self.windows.close_if_idle()
            if time.monotonic() >= self.deadline():
                raise ChildTimeout()

    def timed(self, command: str, activity: str, **fields: Any) -> Message:
        """``command`` sent and answered in an exclusive window, on the timeline as ``activity``."""
        self.waited_s += self.windows.enter(self.left())
        try:
            with timeline.span(self.windows.lock_dir, activity, self.windows.where, problem=self.windows.problem,
                               **fields):
                self.child.send(command, deadline=self.deadline())
                return self.recv()
        finally:
            self.windows.leave()
            self.windows.close()

    def stop(self) -> None:
        """The child killed while the lease is held (in the open exclusive window, else with no step-aside starting
        meanwhile), unfollowed first: its pid, once reused, is never stopped. Then any window closed."""
        lease = self.yielding_lease
        held = contextlib.nullcontext() if lease is None or self.windows.is_open else lease.held()
        with held:
            if lease is not None:
                lease.follow(None)
            self.child.kill()
        self.windows.close()


def _error(m: Message) -> str:
    return f"error: {(m.header.get('error') or m.type)[-1500:]}"


def _run_one(problem_path: Path, cfg: BaselineConfig, yielding_lease: gpu_lock.YieldingLease | None, gpu: str | None,
             which: str) -> tuple[str, dict[str, Any]]:
    """One child, one baseline (``which``: eager or compile). Returns (status, info)."""
    base = Path(tempfile.mkdtemp(prefix=f"kbbase-{which}-"))
    work, logs = base / "work", base / "logs"
    work.mkdir()
    shutil.copyfile(problem_path, work / "problem.py")
    cache = Path(cfg.compile_cache) if cfg.compile_cache and which == "compile" else None
    problem_key = sha256_file(problem_path)
    seeded = compile_cache.seed(cache, problem_key, work) if cache else 0
    init = {"problem": "problem.py", "seed": cfg.seed, "tf32": cfg.tf32, "timing": cfg.timing_protocol().to_dict(),
            "exclusive_windows": yielding_lease is not None}
    child = ChildProcess("baseline", work, logs, cfg.device, init, gpu=gpu, isolation=cfg.isolation,
                         # No tree cap: a baseline runs the problem's own code, which builds inputs of up to 16 GiB
                         # in the child (CPU baselines keep RLIMIT_AS).
                         bwrap=cfg.bwrap, limits=dataclasses.replace(cfg.limits(), memory_bytes=None),
                         extra_env={"TORCHINDUCTOR_COMPILE_THREADS": str(cfg.compile_threads), **cfg.cpu_thread_env()})
    windows = ExclusiveWindows(yielding_lease, cfg.lock_dir, gpu if gpu is not None else cfg.device, problem_path.stem,
                               alone=cfg.autotune_alone)
    run = _Run(child, yielding_lease, windows, cfg.effective_timeout())
    t0 = time.monotonic()
    info: dict[str, Any] = {}
    try:
        run.start()
        m = run.recv()
        if m.type != "loaded":
            return _error(m), info
        info["tf32"] = m.header.get("tf32")
        fields: dict[str, Any] = {}
        if which == "compile":
            child.send("compile", deadline=run.deadline(), mode=cfg.compile_mode)
            m = run.recv()
            if m.type != "compiled":
                return _error(m), info
            info.update({k: m.header.get(k) for k in ("max_abs_diff_vs_eager", "autotune_exclusive",
                                                       "windows_granted")})
            stops = list(yielding_lease.stop_spans) if yielding_lease is not None else []
            info["compile_time_s"] = fields["compile_time_s"] = compile_seconds(m.header, stops)
        m = run.timed("eager" if which == "eager" else "time", f"baseline_{which}", **fields)
        if m.type != "timing":
            return _error(m), info
        info["raw"] = m.header.get("raw")
        if cache is not None:  # read while the child runs: its private folder goes with it
            info["compile_cache"] = compile_cache.CacheUse(seeded, compile_cache.keep(cache, problem_key,
                                                                                        child.private_dir())).to_dict()
        child.send("finish")
        return "ok", info
    except (ChildTimeout, gpu_lock.GpuLockTimeout):
        return f"timeout after {cfg.effective_timeout():.0f}s", info
    except ChildDied:
        return f"crash: the child {child.death_reason()}: {child.log_tail(800)}", info
    except ProtocolError as e:
        return f"error: protocol: {e}", info
    finally:
        run.stop()
        held = run.gpu_held_s()
        info.update(wall_s=time.monotonic() - t0, gpu_wait_s=run.waited_s, stopped_s=run.frozen_s() - held,
                    gpu_held_s=held)
        shutil.rmtree(base, ignore_errors=True)


def compile_seconds(compiled: dict[str, Any], stops: list[tuple[float, float]]) -> float | None:
    """The first call's seconds of compiling: its span (the child's ``compile_span``) less what of it the child spent
    waiting for an exclusive window (its ``wait_spans``) or stood stopped while the lease stepped aside (``stops``),
    each second once where a wait and a stop overlap (a stop can begin while the child's request waits to be read).
    None where the child's reply has no readable span."""
    try:
        start, end = (float(x) for x in compiled["compile_span"])
        waits = [(float(a), float(b)) for a, b in compiled.get("wait_spans") or []]
    except (KeyError, TypeError, ValueError):
        return None
    if not start <= end:
        return None
    return max(0.0, end - start - covered_seconds([*waits, *stops], start, end))


def measure_baselines(problem_path: Path, config: BaselineConfig | None = None) -> BaselineResult:
    cfg = config or BaselineConfig()
    cfg = dataclasses.replace(cfg, compile_threads=resources.compile_threads(None, cfg.compile_threads))
    problem_path = Path(problem_path)
    expected = resources.problem_gpu_gib("baseline", problem_path, {}) if cfg.device == "cuda" else None
    with (gpu_lock.lease_for_job(cfg.device, cfg.gpu_index, cfg.gpus, cfg.lock_dir, exclusive=False,
                                 expected_mem_gib=expected, purpose="baseline") as lease,
          gpu_lock.yielding(lease, hold=cfg.beside_timing_hold()) as yielding_lease):
        gpu = lease.gpu if lease else None
        eager_status, eager = (("skipped", {}) if not cfg.run_eager
                               else _run_one(problem_path, cfg, yielding_lease, gpu, "eager"))
        comp_status, comp = (("skipped", {}) if not cfg.run_compile
                             else _run_one(problem_path, cfg, yielding_lease, gpu, "compile"))
    # Seconds: each child's wall, the waits for exclusive windows, the child held stopped while the lease stepped
    # aside, or running with its GPU work held (compile_beside_timing); and how many autotune windows the compile
    # child was granted (a count).
    phases = {"eager_wall_s": eager.get("wall_s", 0.0), "compile_wall_s": comp.get("wall_s", 0.0),
              **{key: eager.get(key, 0.0) + comp.get(key, 0.0) for key in ("gpu_wait_s", "stopped_s", "gpu_held_s")},
              "autotune_windows": float(comp.get("windows_granted") or 0)}
    eager_stats = timing.stats((eager.get("raw") or {}).get("trials_ms") or []) if eager_status == "ok" else None
    comp_stats = timing.stats((comp.get("raw") or {}).get("trials_ms") or []) if comp_status == "ok" else None
    tf32 = eager.get("tf32") or comp.get("tf32") or environment.tf32_flags_for_mode(cfg.tf32)
    fp = environment.fingerprint(cfg.device, gpu, cfg.tf32, tf32)
    fp["key"] = environment.fingerprint_key(fp)
    return BaselineResult(
        eager_ms=headline_ms(eager_stats), eager_stats=eager_stats, eager_status=eager_status,
        compile_ms=headline_ms(comp_stats), compile_stats=comp_stats, compile_status=comp_status,
        compile_time_s=comp.get("compile_time_s"),
        compile_backend="inductor" if cfg.device == "cuda" else "inductor-cpp", compile_mode=cfg.compile_mode,
        compile_max_abs_diff_vs_eager=comp.get("max_abs_diff_vs_eager"), compile_cache=comp.get("compile_cache"),
        device=cfg.device,
        timing_mode=TIMING_MODES[cfg.device], tf32=tf32, fingerprint=fp,
        protocol={"seed": cfg.seed, "inputs": "seed 42 (KernelBench)", "timing": cfg.timing_protocol().to_dict(),
                  "precision": "fp32", "integer_inputs": "kept", "no_grad": True, "eval_mode": False,
                  "dynamo_reset": True, "compile_threads": cfg.compile_threads,
                  "cpu_threads": cfg.cpu_threads if cfg.device == "cpu" else None,
                  # How Inductor's autotuning got its windows (baseline_windows): "benchmarks" (a window for each
                  # burst of benchmarks: exclusive or the job's turn, as autotune_alone says), "whole_first_call"
                  # (one exclusive window), or None (no GPU lease, or no compiled first call).
                  "autotune_exclusive": comp.get("autotune_exclusive"),
                  # Whether those windows held the GPU exclusively, or the job's turn beside other jobs' correctness
                  # work (baselines.autotune_alone).
                  "autotune_alone": cfg.autotune_alone,
                  # While other jobs timed: the child stopped whole ("stopped"), or its GPU work held by the driver's
                  # lock while it compiled on ("gpu_held": baselines.compile_beside_timing, where the driver can).
                  # None on the CPU (no lease).
                  "beside_others_timing": None if cfg.device != "cuda" else freezer.beside_others_timing(
                      cfg.beside_timing_hold())},
        phases_s=phases,
    )
