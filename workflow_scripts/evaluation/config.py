"""The run configuration answers and baselines share: where a child runs (device, GPU, isolation, locks), its
limits, and the timing protocol. ``EvalConfig`` (``workflow_scripts.evaluation.answer``) and ``BaselineConfig``
(``workflow_scripts.evaluation.baseline``) extend ``RunConfig`` with their own fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from workflow_scripts.evaluation import environment, gpu_lock, timing
from workflow_scripts.evaluation.memory_cap import MODES as MEMORY_CAP_MODES
from workflow_scripts.evaluation.sandbox import ISOLATION_MODES, Limits
from workflow_scripts.suite.problem_module import KERNELBENCH_SEED


@dataclass
class RunConfig:
    device: str = "cpu"  # "cpu" | "cuda"
    gpu_index: int | None = None
    timeout_s: float | None = None  # default: default_timeout_s[device]
    seed: int = KERNELBENCH_SEED  # models are built (and baselines timed) after seeding with it
    timing_trials: int | None = None  # default 100 on cuda, 10 on cpu
    warmup: int | None = None  # default 3 on cuda, 1 on cpu
    discard_first: int = 1
    l2_flush_mib: int = 256
    # A device-side wait between the L2 flush and the start event (timing.py): host launch work up to this long
    # stays out of the window. 0 = KernelBench's window to the letter.
    launch_headroom_us: float = 200.0
    tf32: str = "pytorch_default"  # "pytorch_default" | "ieee"
    # The OS sandbox around every child (sandbox.py): "auto" (bubblewrap, else unshare, else none, said loudly),
    # "bwrap" or "unshare" (that tool or the evaluation fails), "none".
    isolation: str = "auto"
    bwrap: str | None = None  # a bubblewrap binary (default: $KB_BWRAP, then bwrap on PATH)
    tmp_size_mib: int = 2048  # the child's private tmpfs: size and file-count caps
    tmp_inodes: int = 32768
    lock_dir: str = str(gpu_lock.DEFAULT_LOCK_DIR)
    gpus: list[str] | None = None  # candidate GPUs (default: visible ones)
    # Host memory of an answer's whole process tree beside its transport areas (memory_cap.py; also RLIMIT_AS of
    # each CPU child). None: no cap.
    memory_limit_gib: float | None = 16.0
    memory_cap: str = "auto"  # "auto" (a memory cgroup where the host allows, else polling, said loudly) | "cgroup" | "watch"
    # CPU children: OMP/MKL threads. 1 keeps CPU timings stable (two OpenMP runtimes - torch's and the one
    # Inductor's C++ links - oversubscribe small machines) and lets evaluations run side by side.
    cpu_threads: int | None = 1

    default_timeout_s: ClassVar[dict[str, float]]  # per device, set by each subclass

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.memory_cap not in MEMORY_CAP_MODES:
            raise ValueError(f"memory_cap must be one of {MEMORY_CAP_MODES}, got {self.memory_cap!r}")
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {self.isolation!r}")
        if self.tf32 not in environment.TF32_MODES:
            raise ValueError(f"tf32 must be one of {environment.TF32_MODES}")

    def timing_protocol(self) -> timing.TimingProtocol:
        return timing.TimingProtocol.for_device(self.device, warmup=self.warmup, trials=self.timing_trials,
                                                discard_first=self.discard_first, l2_flush_mib=self.l2_flush_mib,
                                                launch_headroom_us=self.launch_headroom_us if self.device == "cuda"
                                                else 0.0)

    def effective_timeout(self) -> float:
        return float(self.timeout_s) if self.timeout_s else self.default_timeout_s[self.device]

    def limits(self) -> Limits:
        # The tree's cap; on the CPU also each process's address space (CUDA reserves far more than any cap).
        memory_bytes = int(self.memory_limit_gib * (1 << 30)) if self.memory_limit_gib else None
        as_bytes = memory_bytes if self.device == "cpu" else None
        # CPU time: a backstop behind the wall-clock timeout (a spinning CUDA synchronize costs CPU time too).
        cpu_seconds = int(4 * self.effective_timeout()) + 60
        return Limits(as_bytes=as_bytes, cpu_seconds=cpu_seconds, tmp_bytes=int(self.tmp_size_mib) << 20,
                      tmp_inodes=int(self.tmp_inodes), memory_bytes=memory_bytes)

    def cpu_thread_env(self) -> dict[str, str]:
        """The child's OpenMP/MKL thread settings (CPU only)."""
        if self.device != "cpu" or not self.cpu_threads:
            return {}
        return {"OMP_NUM_THREADS": str(self.cpu_threads), "MKL_NUM_THREADS": str(self.cpu_threads)}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
