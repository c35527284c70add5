"""PyTorch baselines per problem: eager and ``torch.compile(mode="max-autotune", backend="inductor")``.

Each baseline runs in its own child process (``workflow_scripts.harness``, role ``baseline``; same isolation,
environment scrubbing and timeout handling as answers, without the answer monitors since the reference code is
trusted), so a crash, a hang or a CUDA error in one never affects the other or the caller. Both are timed with the
same :class:`workflow_scripts.timing.TimingProtocol` as answers (same warm-up, discarded first trial, trial count,
L2 flush, ``torch.no_grad()``, output scrubbing between calls). Baselines are timed on KernelBench's seed-42 inputs.

Compile: ``torch._dynamo.reset()`` first; the first call (tracing + Inductor code generation + autotuning) is
timed separately as ``compile_time_s`` and is not part of ``compile_stats``. On CPU Inductor generates C++
(``compile_backend = "inductor-cpp"``), on CUDA Triton kernels (``"inductor"``). A failing baseline records its
status (``"error: ..."``, ``"timeout"``, ``"crash: ..."``) and the problem stays in every table; its speedup is
null. ``compile_max_abs_diff_vs_eager`` records how far the compiled output is from eager on the timing inputs.

CLI: ``python -m workflow_scripts.baselines --problem P.py --device cpu|cuda --out OUT.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts import environment, gpu_lock, timing
from workflow_scripts.harness import ChildDied, ChildProcess, ChildTimeout, Limits, ProtocolError


def cpu_thread_env(device: str, threads: int | None) -> dict[str, str]:
    from workflow_scripts.evaluate import cpu_thread_env as f

    return f(device, threads)


def write_json_atomic(path: Path, obj: Any) -> None:
    from workflow_scripts.evaluate import write_json_atomic as f

    f(path, obj)


@dataclass
class BaselineConfig:
    device: str = "cpu"
    gpu_index: int | None = None
    timeout_s: float | None = None  # per baseline child; default 600 s (cpu) / 1800 s (cuda)
    seed: int = 42
    timing_trials: int | None = None
    warmup: int | None = None
    discard_first: int = 1
    l2_flush_mib: int = 256
    tf32: str = "pytorch_default"
    compile_mode: str = "max-autotune"
    run_eager: bool = True
    run_compile: bool = True
    compile_threads: int = 1  # TORCHINDUCTOR_COMPILE_THREADS: no worker pool on small machines
    isolation: str = "auto"
    lock_dir: str = str(gpu_lock.DEFAULT_LOCK_DIR)
    gpus: list[str] | None = None
    memory_limit_gib: float | None = 16.0
    cpu_threads: int | None = 1  # as EvalConfig.cpu_threads (answers and baselines alike)

    def timing_protocol(self) -> timing.TimingProtocol:
        return timing.TimingProtocol.for_device(self.device, warmup=self.warmup, trials=self.timing_trials,
                                                discard_first=self.discard_first, l2_flush_mib=self.l2_flush_mib)

    def effective_timeout(self) -> float:
        return float(self.timeout_s) if self.timeout_s else (1800.0 if self.device == "cuda" else 600.0)


@dataclass
class BaselineResult:
    eager_ms: float | None
    eager_stats: dict[str, Any] | None
    eager_status: str
    compile_ms: float | None
    compile_stats: dict[str, Any] | None
    compile_status: str
    compile_time_s: float | None
    compile_backend: str
    compile_mode: str
    compile_max_abs_diff_vs_eager: float | None
    device: str
    timing_mode: str
    tf32: dict[str, Any]
    fingerprint: dict[str, Any]
    protocol: dict[str, Any]
    phases_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _run_one(problem_path: Path, cfg: BaselineConfig, gpu: str | None, which: str) -> tuple[str, dict[str, Any]]:
    """One child, one baseline. Returns (status, info)."""
    base = Path(tempfile.mkdtemp(prefix=f"kbbase-{which}-"))
    work, logs = base / "work", base / "logs"
    work.mkdir()
    shutil.copyfile(problem_path, work / "problem.py")
    init = {"problem": "problem.py", "seed": cfg.seed, "tf32": cfg.tf32, "timing": cfg.timing_protocol().to_dict()}
    as_bytes = int(cfg.memory_limit_gib * (1 << 30)) if (cfg.device == "cpu" and cfg.memory_limit_gib) else None
    child = ChildProcess("baseline", work, logs, cfg.device, init, gpu=gpu, isolation=cfg.isolation,
                         limits=Limits(as_bytes=as_bytes),
                         extra_env={"TORCHINDUCTOR_COMPILE_THREADS": str(cfg.compile_threads),
                                    **cpu_thread_env(cfg.device, cfg.cpu_threads)})
    t0 = time.monotonic()
    deadline = t0 + cfg.effective_timeout()
    info: dict[str, Any] = {}
    try:
        child.start()
        m = child.recv(deadline)
        if m.type != "loaded":
            return f"error: {(m.header.get('error') or m.type)[-1500:]}", info
        info["tf32"] = m.header.get("tf32")
        child.send(which, mode=cfg.compile_mode)
        m = child.recv(deadline)
        if m.type != "timing":
            return f"error: {(m.header.get('error') or m.type)[-1500:]}", info
        info["raw"] = m.header.get("raw")
        info["compile_time_s"] = m.header.get("compile_time_s")
        info["max_abs_diff_vs_eager"] = m.header.get("max_abs_diff_vs_eager")
        child.send("finish")
        return "ok", info
    except ChildTimeout:
        return f"timeout after {cfg.effective_timeout():.0f}s", info
    except ChildDied:
        return f"crash: the child {child.death_reason()}: {child.log_tail(800)}", info
    except ProtocolError as e:
        return f"error: protocol: {e}", info
    finally:
        child.kill()
        info["wall_s"] = time.monotonic() - t0
        shutil.rmtree(base, ignore_errors=True)


def measure_baselines(problem_path: Path, config: BaselineConfig | None = None) -> BaselineResult:
    cfg = config or BaselineConfig()
    problem_path = Path(problem_path)
    phases: dict[str, float] = {}
    with gpu_lock.lease_for_job(cfg.device, cfg.gpu_index, cfg.gpus, cfg.lock_dir, exclusive=True) as lease:
        gpu = lease.gpu if lease else None
        eager_status, eager = ("skipped", {}) if not cfg.run_eager else _run_one(problem_path, cfg, gpu, "eager")
        phases["eager_wall_s"] = eager.get("wall_s", 0.0)
        comp_status, comp = ("skipped", {}) if not cfg.run_compile else _run_one(problem_path, cfg, gpu, "compile")
        phases["compile_wall_s"] = comp.get("wall_s", 0.0)
    eager_stats = timing.stats((eager.get("raw") or {}).get("trials_ms") or []) if eager_status == "ok" else None
    comp_stats = timing.stats((comp.get("raw") or {}).get("trials_ms") or []) if comp_status == "ok" else None
    tf32 = eager.get("tf32") or comp.get("tf32") or environment.tf32_flags_for_mode(cfg.tf32)
    fp = environment.fingerprint(cfg.device, gpu, cfg.tf32, tf32)
    fp["key"] = environment.fingerprint_key(fp)
    return BaselineResult(
        eager_ms=eager_stats["mean"] if eager_stats else None, eager_stats=eager_stats, eager_status=eager_status,
        compile_ms=comp_stats["mean"] if comp_stats else None, compile_stats=comp_stats, compile_status=comp_status,
        compile_time_s=comp.get("compile_time_s"),
        compile_backend="inductor" if cfg.device == "cuda" else "inductor-cpp", compile_mode=cfg.compile_mode,
        compile_max_abs_diff_vs_eager=comp.get("max_abs_diff_vs_eager"), device=cfg.device,
        timing_mode=timing.TIMING_MODES[cfg.device], tf32=tf32, fingerprint=fp,
        protocol={"seed": cfg.seed, "inputs": "seed 42 (KernelBench)", "timing": cfg.timing_protocol().to_dict(),
                  "precision": "fp32", "integer_inputs": "kept", "no_grad": True, "eval_mode": False,
                  "dynamo_reset": True, "compile_threads": cfg.compile_threads,
                  "cpu_threads": cfg.cpu_threads if cfg.device == "cpu" else None},
        phases_s=phases,
    )




def main(argv: list[str] | None = None) -> int:

    ap = argparse.ArgumentParser(description="Time the eager and torch.compile baselines of one problem.")
    ap.add_argument("--problem", type=Path, required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=None, help="seconds per baseline child")
    ap.add_argument("--gpu-index", type=int, default=None)
    ap.add_argument("--tf32", choices=list(environment.TF32_MODES), default="pytorch_default")
    ap.add_argument("--timing-trials", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--compile-mode", default="max-autotune")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--isolation", choices=["auto", "none"], default="auto")
    ap.add_argument("--lock-dir", default=str(gpu_lock.DEFAULT_LOCK_DIR))
    a = ap.parse_args(argv)
    cfg = BaselineConfig(device=a.device, gpu_index=a.gpu_index, timeout_s=a.timeout, tf32=a.tf32,
                         timing_trials=a.timing_trials, warmup=a.warmup, compile_mode=a.compile_mode,
                         run_compile=not a.no_compile, isolation=a.isolation, lock_dir=a.lock_dir)
    res = measure_baselines(a.problem, cfg)
    write_json_atomic(a.out, res.to_dict())
    print(f"{a.problem}: eager {res.eager_status} {res.eager_ms}, compile {res.compile_status} {res.compile_ms} "
          f"(compile {res.compile_time_s}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
