"""The run configurations: ``RunConfig`` (what answers and baselines share: where a child runs, its limits, the
timing protocol), ``EvalConfig`` (an answer's evaluation: KernelBench's correctness protocol and our additions) and
``BaselineConfig`` (a problem's baselines).

This module is the one home of the protocol's numbers: the dataclass field defaults, and ``DEVICE_DEFAULTS`` for the
few that differ by device. The workflow configuration's schema declares no default for them: ``fill_protocol_defaults``
completes a configuration's ``evaluation`` and ``baselines`` sections from here (rules/common.smk), so the rules, the report's
captions and summary.json state the numbers the evaluations use."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from workflow_scripts.evaluation import cuda_lock, environment, freezer, gpu_lock, timing
from workflow_scripts.evaluation.isolation import ISOLATION_MODES
from workflow_scripts.evaluation.limits import Limits
from workflow_scripts.evaluation.memory_cap import MODES as MEMORY_CAP_MODES
from workflow_scripts.evaluation.protocol import WATCHDOG_CALL_S, WATCHDOG_FIRST_CALL_S
from workflow_scripts.suite.problem_module import KERNELBENCH_SEED


@dataclass(frozen=True)
class DeviceDefaults:
    """The protocol's numbers that differ by device."""

    timing_trials: int  # timed trials per forward (the first ``discard_first`` discarded)
    warmup: int  # untimed calls before them
    answer_timeout_s: float  # one answer's whole evaluation
    baseline_timeout_s: float  # each baseline child (eager, compile)
    prestart: int  # answer processes an evaluate job starts at once, ahead of their answers (EvalConfig.prestart)


# KernelBench's protocol on the GPU (3 warm-up calls, 100 timed trials); on the CPU the Triton interpreter is about a
# thousand times slower: fewer trials, and time for it.
# Answer processes started at once on CUDA: 4, a whole job's worth in a 4-model run. An evaluate job keeps a batch and
# the answer being judged alive, and declares their memory (resources.answer_processes): at the study's 15 answers per
# problem a batch of 15 declared 16 processes (a CUDA context and 1.5 GiB of host memory each, beside their input and
# output areas), and the declared memory let an H200 host run 2.70 level-2 evaluate jobs at once on average, against
# 3.93 with 4 (1.32 and 2.00 of level 1; bench/project_study.py --kernelbench, bench/README.md s35). A process's start
# takes 3-5 s on the host and 0.2 s on the device (bench/archive/NOTES.md, eleventh session), hidden behind the batch
# of answers before it (ProblemEvaluator starts one more as each answer is taken up).
DEVICE_DEFAULTS: dict[str, DeviceDefaults] = {
    "cuda": DeviceDefaults(timing_trials=100, warmup=3, answer_timeout_s=1200.0, baseline_timeout_s=1800.0,
                           prestart=4),
    "cpu": DeviceDefaults(timing_trials=10, warmup=1, answer_timeout_s=300.0, baseline_timeout_s=600.0, prestart=1),
}


@dataclass
class RunConfig:
    device: str = "cpu"  # "cpu" | "cuda"
    gpu_index: int | None = None
    # None: the device's (DEVICE_DEFAULTS), set when the configuration is made, so every record holds the number.
    timeout_s: float | None = None
    seed: int = KERNELBENCH_SEED  # models are built (and baselines timed) after seeding with it
    timing_trials: int | None = None  # None: the device's
    warmup: int | None = None  # None: the device's
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

    # Which of DEVICE_DEFAULTS' timeouts ``timeout_s`` defaults to (each subclass's own).
    timeout_default: ClassVar[str]

    def __post_init__(self) -> None:
        if self.device not in DEVICE_DEFAULTS:
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        defaults = DEVICE_DEFAULTS[self.device]
        if self.timeout_s is None:
            self.timeout_s = getattr(defaults, self.timeout_default)
        if self.timing_trials is None:
            self.timing_trials = defaults.timing_trials
        if self.warmup is None:
            self.warmup = defaults.warmup
        if self.memory_cap not in MEMORY_CAP_MODES:
            raise ValueError(f"memory_cap must be one of {MEMORY_CAP_MODES}, got {self.memory_cap!r}")
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {self.isolation!r}")
        if self.tf32 not in environment.TF32_MODES:
            raise ValueError(f"tf32 must be one of {environment.TF32_MODES}")

    def timing_protocol(self) -> timing.TimingProtocol:
        assert self.warmup is not None and self.timing_trials is not None  # set by __post_init__
        return timing.TimingProtocol(warmup=self.warmup, trials=self.timing_trials, discard_first=self.discard_first,
                                     l2_flush_mib=self.l2_flush_mib,
                                     launch_headroom_us=self.launch_headroom_us if self.device == "cuda" else 0.0)

    def effective_timeout(self) -> float:
        """The wall-clock limit in seconds (an answer's whole evaluation; each baseline child)."""
        assert self.timeout_s is not None  # set by __post_init__
        return float(self.timeout_s)

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


@dataclass
class EvalConfig(RunConfig):
    """An answer's evaluation: the run configuration, KernelBench's correctness protocol and the additions."""

    timeout_default: ClassVar[str] = "answer_timeout_s"
    correctness_trials: int = 5
    atol: float = 1e-4
    rtol: float = 1e-4
    require_triton: bool = True
    time_answer: bool = True
    hidden_trials: int = 1
    # Secret seeds, drawn per run when None; set them to replay a run.
    hidden_seeds: list[int] | None = None
    timing_seed: int | None = None
    post_timing_seed: int | None = None
    run_static: bool = True
    keep_workdir: bool = False
    # The per-call watchdog's floor in seconds (protocol.call_limit_s). None: the protocol's floors on CUDA, and no
    # watchdog on the CPU, where the Triton interpreter's speed says nothing about the reference's.
    watchdog_floor_s: float | None = None
    # Answer processes started ahead of their answers (a process takes seconds to start: torch, CUDA, Triton's driver,
    # and none may start while an answer is timed; one more starts as each answer is taken up). None: the device's
    # (DEVICE_DEFAULTS: 4 on CUDA, where an idle child holds a CUDA context and the L2 flush buffer; 1 on the CPU).
    # Bounded by host memory: each holds its own input and output areas (ProblemEvaluator.batch_size). Not in the
    # store key: it changes when an answer is judged, not its result.
    prestart: int | None = None
    # Whether an evaluate job's shared GPU lease steps aside for other jobs' timing between the job's own GPU steps
    # (gpu_lock.YieldingLease, as baselines do), its answer's process tree stopped meanwhile; off: the lease lasts the
    # whole job, so no other job times on that GPU while one of its answers lives. A stopped process stops its CPU,
    # not GPU work it left queued, which the driver's checkpoint lock completes and holds (cuda_lock; freezer locks
    # a tree before stopping it, and a tree it cannot lock whole does not step aside). "auto": yield where that lock
    # is there (driver 550 and later), the whole-job lease elsewhere. true yields with stopping alone where it is not
    # (a hostile answer could leave a kernel running into another job's timing). Why not off: with the whole-job
    # lease each of a baseline's exclusive autotuning windows and each answer's timing waits for every other
    # evaluation to end or reach its own timing (s37 on an H100: a timer waited 271.8 s of a 574.5-s run behind
    # evaluations holding the GPU; docs/evaluation.md).
    yield_gpu: bool | Literal["auto"] = "auto"
    # While the job's lease steps aside for another job's timing (yield_gpu), the answer's CUDA processes locked by
    # the driver and left running, so their CPU work (Triton compiling the answer's kernels, in its first calls) goes
    # on, every other process of the tree stopped (True), or the tree stopped whole (False, and wherever the driver
    # has no lock): freezer.Hold.LOCKED_RUNNING. Off by default: native code of a locked process could undo or bypass
    # the driver's lock, which is caught only after the fact (flag hold_broken), and the answer's CPU load beside a
    # timing is only recorded (phases_s.cpu_beside_timing_s, flag cpu_beside_timing). Not part of the store key: no
    # honest answer's verdict or timing changes (its own timing and its reference's stop it whole, as before).
    compile_beside_timing: bool = False
    # Trials per block of paired timing (timing.paired_blocks): the eager reference is timed on the same inputs in
    # blocks alternating with the answer's, and the speedup is taken against it. 0: the answer alone, in one window
    # (KernelBench's loop; the speedup is then taken against the baseline stage's eager time).
    paired_block: int = 10
    # Trials per block of the eager reference in paired timing (timing.reference_block; at most paired_block): as
    # many as the answer's by default, the protocol the calibration was measured with. Fewer save a reference forward
    # each (5: half a second per answer on a 10 ms problem) and widen the speedup's spread (bench/archive/NOTES.md, eleventh
    # session: with 5, |speedup-1| p90 0.57% on 28 problems against 0.15% with 10 on the same problems).
    paired_reference_block: int = 10
    # "keep": only floating inputs become fp32 (integer targets stay integer); "cast": every input tensor becomes
    # fp32, as KernelBench casts them (its level-1 problem 95 then fails: cross-entropy needs integer targets).
    integer_inputs: str = "keep"
    # False: integrity flags and static-analysis rejections are recorded but do not change the verdict, which then
    # rests on the outputs alone, as KernelBench's does.
    reject_cheats: bool = True
    # The re-check on fresh inputs after timing (KernelBench has none).
    post_timing_check: bool = True
    # Directories the answer's sandbox shows empty, besides the problem's own sources (isolation.problem_sources),
    # e.g. the workflow's results folder, which holds the prompts (the reference code of every problem).
    hidden_paths: list[str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.integer_inputs not in ("keep", "cast"):
            raise ValueError(f"integer_inputs must be keep or cast, got {self.integer_inputs!r}")
        if not (isinstance(self.yield_gpu, bool) or self.yield_gpu == "auto"):
            raise ValueError(f"yield_gpu must be true, false or auto, got {self.yield_gpu!r}")
        if self.paired_reference_block < 1:
            raise ValueError(f"paired_reference_block must be at least 1, got {self.paired_reference_block!r}")

    @classmethod
    def kernelbench_exact(cls, **overrides: Any) -> "EvalConfig":
        """KernelBench's verdicts to the letter (docs/evaluation.md, "Deviations"): no Triton requirement, only its 5
        seeded trials (no hidden or post-timing check), every input cast to fp32, cheats flagged but not rejected,
        the answer timed alone (its eager speedup against the baseline stage) in KernelBench's window to the letter
        (no launch headroom). Isolation, the watchdog and the dtype check stay: they decide nothing for an answer
        that KernelBench would pass."""
        settings: dict[str, Any] = dict(require_triton=False, hidden_trials=0, post_timing_check=False,
                                        integer_inputs="cast", reject_cheats=False, paired_block=0,
                                        launch_headroom_us=0.0)
        settings.update(overrides)
        return cls(**settings)

    def yields_gpu(self) -> bool:
        """Whether this evaluation's lease steps aside for other jobs' timing (``yield_gpu`` resolved for its device
        and driver)."""
        if self.yield_gpu == "auto":
            return self.device == "cuda" and cuda_lock.available()
        return bool(self.yield_gpu)

    def beside_timing_hold(self) -> freezer.Hold:
        """How the answer's tree is held while its lease steps aside (``compile_beside_timing``)."""
        return freezer.Hold.LOCKED_RUNNING if self.compile_beside_timing else freezer.Hold.STOPPED

    def prestart_count(self) -> int:
        return max(1, int(self.prestart if self.prestart is not None else DEVICE_DEFAULTS[self.device].prestart))

    def watchdog_limits(self) -> tuple[float, float] | None:
        """(first call, later calls) floors in seconds, or None without a watchdog."""
        if self.watchdog_floor_s is not None:
            return (self.watchdog_floor_s, self.watchdog_floor_s)
        return (WATCHDOG_FIRST_CALL_S, WATCHDOG_CALL_S) if self.device == "cuda" else None


@dataclass
class BaselineConfig(RunConfig):
    """A problem's baselines: the run configuration answers use (seed 42: KernelBench times on its inputs) and
    the compile settings."""

    timeout_default: ClassVar[str] = "baseline_timeout_s"
    compile_mode: str = "max-autotune"
    run_eager: bool = True
    run_compile: bool = True
    # TORCHINDUCTOR_COMPILE_THREADS; None: resources.compile_threads of this host (the pipeline passes its rule's
    # threads, which Snakemake reserved for it)
    compile_threads: int | None = None
    # A folder where what torch.compile builds persists between compile children of one environment
    # (compile_cache.py; the baseline stage passes one per environment in the store); None: a fresh cache each time.
    compile_cache: str | None = None
    # Inductor's autotuning benchmarks with the GPU exclusively (True, the default), or in the job's GPU turn (False):
    # beside other jobs' untimed GPU work but never beside a timing (baseline_windows.ExclusiveWindows). In the turn
    # a run took 412.6 s instead of over 480 s on an H100, its compiled times within 0.8% (s28), but in s30 one of 20
    # compiled baselines, its bursts all beside evaluations, came out 2.06x slower (bench/README.md): a swayed pick
    # moves every model's compiled speedup on the problem. Part of the store key: the picks may differ.
    autotune_alone: bool = True
    # While another job times on the GPU, the compiling child's GPU work held by the CUDA driver's lock and its CPU
    # work (Inductor's code generation and compile workers) going on (True), or the child stopped whole (False, and
    # wherever the driver has no lock): freezer.Hold.GPU_HELD. Not part of the store key: it moves no
    # pick and no timing of the baseline's own.
    compile_beside_timing: bool = True

    def beside_timing_hold(self) -> freezer.Hold:
        """How the compiling child's tree is held while its lease steps aside (``compile_beside_timing``)."""
        return freezer.Hold.GPU_HELD if self.compile_beside_timing else freezer.Hold.STOPPED


def filled(config_class: type[RunConfig], section: Mapping[str, Any], keys: Iterable[str],
           **given: Any) -> dict[str, Any]:
    """A configuration's section (``evaluation`` or ``baselines``) with each of ``keys`` (the schema's keys of that
    section) that it leaves out and ``config_class`` has as a field set to that field's value: its default, or the
    device's (``given`` adds settings from elsewhere, e.g. the device for the baselines)."""
    fields = config_class.__dataclass_fields__
    settings = {k: v for k, v in {**section, **given}.items() if k in fields and k != "gpus"}
    resolved = config_class(**settings)
    out = dict(section)
    for key in keys:
        if key in fields and key not in out:
            out[key] = getattr(resolved, key)
    return out


def fill_protocol_defaults(config: dict[str, Any], schema_file: Path | str) -> None:
    """A workflow configuration's ``evaluation`` and ``baselines`` sections completed in place: every key of the
    schema that they leave out, from the run configurations (``filled``). The schema declares no default for them."""
    import yaml

    sections = yaml.safe_load(Path(schema_file).read_text(encoding="utf-8"))["properties"]
    config["evaluation"] = filled(EvalConfig, config["evaluation"], sections["evaluation"]["properties"])
    config["baselines"] = filled(BaselineConfig, config["baselines"], sections["baselines"]["properties"],
                                 device=config["evaluation"]["device"])


def given(**settings: Any) -> dict[str, Any]:
    """The settings a person gave (a command line's options), without those left out (None): the configuration's
    defaults then apply, from their one home here."""
    return {k: v for k, v in settings.items() if v is not None}

