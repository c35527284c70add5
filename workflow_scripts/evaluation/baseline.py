"""PyTorch baselines per problem: eager and ``torch.compile(mode="max-autotune", backend="inductor")``.

Each baseline runs in its own child process (``workflow_scripts.evaluation.child``, role ``baseline``; same
isolation, environment scrubbing and timeout handling as answers, without the answer monitors since the reference
code is trusted), so a crash, a hang or a CUDA error in one never affects the other or the caller. Both are timed
with the same :class:`workflow_scripts.evaluation.timing.TimingProtocol` as answers (same warm-up, discarded first
trial, trial count, L2 flush, ``torch.no_grad()``, output scrubbing between calls). Baselines are timed on
KernelBench's seed-42 inputs.

Compile: ``torch._dynamo.reset()`` first; the first call (tracing + Inductor code generation + autotuning) is
timed separately as ``compile_time_s`` and is not part of ``compile_stats``. On CPU Inductor generates C++
(``compile_backend = "inductor-cpp"``), on CUDA Triton kernels (``"inductor"``). A failing baseline records its
status (``"error: ..."``, ``"timeout"``, ``"crash: ..."``) and the problem stays in every table; its speedup is
null. ``compile_max_abs_diff_vs_eager`` records how far the compiled output is from eager on the timing inputs.

CLI: ``python -m workflow_scripts baseline --problem P.py --device cpu|cuda --out OUT.json``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from workflow_scripts.core.records import TIMING_MODES, headline_ms
from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.evaluation import compile_cache, environment, gpu_lock, resources, timeline, timing
from workflow_scripts.evaluation.channel import ChildDied, ChildTimeout, ProtocolError
from workflow_scripts.evaluation.config import BaselineConfig
from workflow_scripts.evaluation.records import BaselineResult
from workflow_scripts.evaluation.sandbox import ChildProcess


def _run_one(problem_path: Path, cfg: BaselineConfig, gpu: str | None, which: str) -> tuple[str, dict[str, Any]]:
    """One child, one baseline. Returns (status, info)."""
    base = Path(tempfile.mkdtemp(prefix=f"kbbase-{which}-"))
    work, logs = base / "work", base / "logs"
    work.mkdir()
    shutil.copyfile(problem_path, work / "problem.py")
    cache = Path(cfg.compile_cache) if cfg.compile_cache and which == "compile" else None
    problem_key = sha256_file(problem_path)
    seeded = compile_cache.seed(cache, problem_key, work) if cache else 0
    init = {"problem": "problem.py", "seed": cfg.seed, "tf32": cfg.tf32, "timing": cfg.timing_protocol().to_dict()}
    child = ChildProcess("baseline", work, logs, cfg.device, init, gpu=gpu, isolation=cfg.isolation,
                         # No tree cap: a baseline runs the problem's own code, which builds inputs of up to 16 GiB
                         # in the child (CPU baselines keep RLIMIT_AS).
                         bwrap=cfg.bwrap, limits=dataclasses.replace(cfg.limits(), memory_bytes=None),
                         extra_env={"TORCHINDUCTOR_COMPILE_THREADS": str(cfg.compile_threads), **cfg.cpu_thread_env()})
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
        if cache is not None:  # read while the child runs: its private folder goes with it
            info["compile_cache"] = compile_cache.CacheUse(seeded, compile_cache.keep(cache, problem_key,
                                                                                        child.private_dir())).to_dict()
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
    cfg = dataclasses.replace(cfg, compile_threads=resources.compile_threads(None, cfg.compile_threads))
    problem_path = Path(problem_path)
    phases: dict[str, float] = {}
    expected = resources.problem_gpu_gib("baseline", problem_path, {}) if cfg.device == "cuda" else None
    with gpu_lock.lease_for_job(cfg.device, cfg.gpu_index, cfg.gpus, cfg.lock_dir, exclusive=True,
                                expected_mem_gib=expected, purpose="baseline") as lease:
        gpu = lease.gpu if lease else None
        where = gpu if gpu is not None else cfg.device
        with timeline.span(cfg.lock_dir, "baseline_eager", where, problem=problem_path.stem):
            eager_status, eager = ("skipped", {}) if not cfg.run_eager else _run_one(problem_path, cfg, gpu, "eager")
        phases["eager_wall_s"] = eager.get("wall_s", 0.0)
        t_compile = time.time()
        comp_status, comp = ("skipped", {}) if not cfg.run_compile else _run_one(problem_path, cfg, gpu, "compile")
        timeline.append(cfg.lock_dir, "baseline_compile", where, t_compile, time.time(), problem=problem_path.stem,
                        compile_time_s=comp.get("compile_time_s"))
        phases["compile_wall_s"] = comp.get("wall_s", 0.0)
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
                  "cpu_threads": cfg.cpu_threads if cfg.device == "cpu" else None},
        phases_s=phases,
    )
