"""One GPU per job, through per-GPU lock files.

Each visible GPU ``g`` has a lock file ``<lock_dir>/gpu<g>.lock`` (the pipeline passes ``<results>/.locks/<host>``; by hand the default is ``results/.locks``). A job
takes an ``fcntl.flock`` on one of them:

* **exclusive** (``LOCK_EX``) for timing: nothing else runs on that GPU while the job times;
* **shared** (``LOCK_SH``) for correctness-only work: several such jobs may share a GPU, but never with a timing
  job. An evaluation starts shared and calls ``GpuLease.upgrade()`` only when its answer passed correctness and
  is about to be timed (most answers never get there), so correctness work runs side by side.

A job tries the GPUs in turn without blocking, the GPU with the fewest holders first (each holder also holds one of
the GPU's ``gpu<g>.holder<i>`` slot files: counting the locked ones counts the jobs there, so jobs spread over the
host's GPUs; ties are broken by an offset derived from the pid), and sleeps ``poll_s`` between rounds until
``timeout_s``. The count and the reservation of a slot on the least held GPU happen together under
``select.lock``, so jobs started at once spread too; a job waiting for a GPU counts as its holder. flock locks
belong to the open file description and vanish when the holder dies, so a crashed or killed job never leaves a GPU
locked. The chosen GPU's id is what the evaluation child gets as
``CUDA_VISIBLE_DEVICES`` (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so the id means the same card to CUDA as to
``nvidia-smi``).

Starvation: a stream of shared holders can keep an exclusive job waiting (flock is not fair). To bound that, an
exclusive job first takes ``gpu<g>.gate`` exclusively while it waits on that GPU and shared jobs must briefly take
the gate shared before locking, so new shared jobs queue behind a waiting timing job.

Timeline: each lease writes how long it held its GPU in each mode, and how long an upgrade waited, to the lock
folder's ``timeline.jsonl`` (``timeline``), beside what the jobs write of their timed work.

Yielding: a baseline job (``YieldingLease``) holds its GPU shared while its child loads, builds inputs and compiles
(tens of seconds for ``torch.compile``), which would keep every timing job out of that GPU meanwhile. A thread of its
trusted process watches the gate instead: when a timing job waits, it stops the child's process tree (``freezer``),
drops the shared lock and takes it back through the gate as ``downgrade`` does, so the waiter times first, then resumes
the child (``lease_yielded`` on the timeline). Where the driver has the checkpoint lock (``cuda_lock``) and
``baselines.compile_beside_timing`` is set (the default), the baseline's child is not stopped: only its GPU work is
held, and its compiling goes on beside the timing. The job's own exclusive windows (``YieldingLease.upgrade``) are never
given up. A shared lease that never steps aside (an evaluation's with ``yield_gpu: false``; a yielding one after
``INCOMPLETE_STOPS_BEFORE_PIN`` incomplete stops in a row, or a failed step-aside) pins its GPU (``gpu<g>.pin`` held
shared, dropped with the shared lock as its upgrade begins): while one does, a waiting timer cannot start anyway, so a
yielding lease leaves it alone and its child keeps compiling (``timer_blocked_elsewhere``; only a hint, the lock alone
decides who holds the GPU). Where ``evaluation.yield_gpu`` holds (``EvalConfig.yields_gpu``), an evaluation job yields
the same way between its steps and during its answer's own work: its trusted side's own GPU work (the reference side's
preparation, a block per piece of it, each correctness trial's reference, inputs and judging, an answer process's device
start) runs in ``held`` blocks, which the watcher never cuts but goes first after (the job begins no new block while it
waits), and the answer's process, once it runs the answer's code, is the followed tree,
stopped during its import and its calls too (the seconds move its deadlines). A stopped process's queued GPU work still
runs, so a hostile answer could leave a kernel running into the other job's timing; where the driver has the checkpoint
lock (``cuda_lock``), a stop also completes and holds the tree's GPU work, and a tree whose work could not be held is
incomplete (no step-aside; an answer's upgrade stops it again, then gives up, ``TreeNotHeld``), which answers that (on
an H100 every timed answer's tree was locked, s30, s33, s34). So by default (``auto``) evaluations yield where the
driver has that lock and keep the whole-job shared lease elsewhere, whose price is the convoy: a job waiting to time,
and each baseline's exclusive autotuning window, waits for every other evaluation on its GPU to end or to time (on an
H100 a timer waited 271.8 s of a 574.5-s run behind evaluations, s37; with yielding 57.6-68.3 s, s33-s34;
bench/README.md). s30's pair, where the whole-job lease was faster (337.9 s against 368.3 s), ran the autotuning
benchmarks in the baseline's turn, not in windows of their own.

Memory: each holder writes ``gpu<g>.<pid>.json`` (mode, pid, purpose, expected peak memory if given) next to the lock,
removed on release. A job that gives its expected memory and the GPU's capacity is admitted only while the live holders'
expectations and its own fit ``DEVICE_SHARE`` of the card (or the card has no other holder), checked and recorded under
``select.lock``: evaluations started by hand side by side wait for room instead of failing out of memory (Snakemake's
``gpu_mem_gb`` resource does the same for a pipeline run). On CPU no lock is taken (``acquire_gpu`` is not called).

Visible GPUs come from, in order: an explicit list (config), ``CUDA_VISIBLE_DEVICES``, ``nvidia-smi -L``,
``torch.cuda.device_count()`` asked in a child process (the caller never initialises CUDA itself).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from workflow_scripts.core.records import GENERATION_PURPOSE
from workflow_scripts.evaluation import cuda_lock, freezer, timeline
from workflow_scripts.evaluation.memory_plan import DEVICE_SHARE

DEFAULT_LOCK_DIR = Path("results/.locks")
HOLDER_SLOTS = 64  # per GPU: more jobs than this on one GPU still run, they just go uncounted
# A yielding lease (``YieldingLease``) looks at its GPU's gate this often: one non-blocking flock, microseconds, so a
# timing job that starts waiting is let in within this (plus its own poll) of taking the gate.
GATE_POLL_S = 0.005
# How often a lease that stepped aside (or is downgrading) tries to get its shared lock back while another job times:
# the waits last the other job's timing (seconds), so a slower poll costs little and wakes this host less.
REENTRY_POLL_S = 0.05
# How often a job waiting to time (``upgrade``) tries the exclusive lock. The GPU stands idle from the holders' release
# to the waiter's next try, once per timed window: at 0.2 s, a lent H100's 20-problem run spent 26 s of its 372 s wall
# with a timer waiting and no lease held at all (``wall_bound.py``'s ``waiting_none_held``, bench/README.md, s33;
# its some 350 timed windows at about 0.075 s each). One non-blocking flock a try: microseconds.
HANDOVER_POLL_S = 0.01
# How often a job entering its GPU shared (``acquire_gpu``) tries again: its wait delays its untimed work, not the GPU
# (a job entering alone, the device rates or a vLLM job, waits as a timer does: ``HANDOVER_POLL_S``). A round that a
# waiting timer's gate or a timer's lock refuses costs two non-blocking flocks; only the others take ``select.lock``.
ENTRY_POLL_S = 0.05


class TreeNotHeld(RuntimeError):
    """The followed process tree could not be held off the GPU (``freezer``: a process still running, or GPU work
    the driver's lock could not complete or see) in ``YieldingLease.UPGRADE_STOP_TRIES`` tries: the job still holds
    the GPU shared, and the tree must not run beside another job's timing, which an upgrade's wait would allow."""


class GpuLockTimeout(TimeoutError):
    pass


@dataclass
class GpuLease:
    gpu: str  # the id given to the child as CUDA_VISIBLE_DEVICES
    mode: str  # "exclusive" | "shared" | "released" (a step-aside given up as its job ended: nothing held)
    lock_path: Path
    waited_s: float
    _fd: int = -1
    _info_path: Path | None = None

    _gate_fd: int = -1
    # ``gpu<g>.pin``, held shared while this lease pins its GPU (``pin``): a shared holder that does not step aside.
    _pin_fd: int = -1
    _pins: bool = False  # set by ``pin``: the lease holds the pin whenever it holds its shared lock
    purpose: str = "job"  # what holds it (evaluate, baseline, vllm): the timeline's lines say so
    _since: float = field(default_factory=time.time)  # when the current mode began (the timeline's lease lines)

    def to_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "mode": self.mode, "lock_path": str(self.lock_path), "waited_s": self.waited_s}

    def _mark(self, activity: str, start: float | None = None) -> float:
        """The interval from ``start`` (the current mode's start) to now, on the run's timeline; returns now."""
        now = time.time()
        timeline.append(self.lock_path.parent, activity, self.gpu, self._since if start is None else start, now,
                        purpose=self.purpose)
        return now

    def upgrade(self, timeout_s: float | None = None, poll_s: float = HANDOVER_POLL_S) -> float:
        """Shared -> exclusive on the same GPU (the job's processes are already bound to it), e.g. once an
        answer passed correctness and is about to be timed. Holds the GPU's gate while waiting so new shared
        jobs queue behind. flock conversion drops the shared lock first, so two upgraders cannot deadlock.
        Returns the seconds waited."""
        if self.mode == "exclusive":
            return 0.0
        t0 = time.monotonic()
        wait_start = self._mark("lease_shared")
        gate_held = _try_lock(self._gate_fd, fcntl.LOCK_EX) if self._gate_fd >= 0 else False
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._hold_pin(False)  # waiting, this job no longer keeps a timer out: a yielding lease may step aside
            while not _try_lock(self._fd, fcntl.LOCK_EX):
                if gate_held is False and self._gate_fd >= 0:
                    gate_held = _try_lock(self._gate_fd, fcntl.LOCK_EX)
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    # Fall back to shared so the caller still holds the GPU it runs on.
                    fcntl.flock(self._fd, fcntl.LOCK_SH)
                    self._hold_pin(True)
                    self._since = self._mark("lease_wait", wait_start)  # shared again from now on
                    raise GpuLockTimeout(f"GPU {self.gpu}: no exclusive lock after {timeout_s:.0f}s")
                time.sleep(poll_s)
        finally:
            if gate_held:
                fcntl.flock(self._gate_fd, fcntl.LOCK_UN)
        self.mode = "exclusive"
        self._since = self._mark("lease_wait", wait_start)
        waited = time.monotonic() - t0
        self.waited_s += waited
        return waited

    def downgrade(self, poll_s: float = REENTRY_POLL_S) -> float:
        """Exclusive -> shared once timing is done, keeping the same GPU (a problem's trusted side lives there).
        Re-enters through the gate, so a timing job already waiting on this GPU goes first. Returns seconds
        waited."""
        if self.mode == "shared":
            return 0.0
        t0 = time.monotonic()
        self._since = self._mark("lease_exclusive")
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._reenter_shared(poll_s)
        self._hold_pin(True)
        self.mode = "shared"
        waited = time.monotonic() - t0
        self.waited_s += waited
        return waited

    def pin(self) -> None:
        """From now on, while shared, this lease says it will not step aside (``gpu<g>.pin`` held shared): a yielding
        lease on the GPU then leaves a waiting timer alone (``timer_blocked_elsewhere``), since the timer cannot get
        the GPU before this job lets it go anyway. The pin is dropped whenever the shared lock is (``upgrade``)."""
        self._pins = True
        self._hold_pin(self.mode == "shared")

    @property
    def pins(self) -> bool:
        return self._pins

    def _hold_pin(self, hold: bool) -> None:
        if self._pins and self._pin_fd >= 0:
            fcntl.flock(self._pin_fd, fcntl.LOCK_SH if hold else fcntl.LOCK_UN)

    def timer_blocked_elsewhere(self) -> bool:
        """Whether another job's shared lease pins this GPU (``pin``): a waiting timer cannot start before that job
        lets it go, so a step-aside now would only stop this job's child for nothing. One non-blocking flock on the
        pin, released at once. Only a hint: which job holds the GPU is decided by the lock alone."""
        if self._pin_fd < 0 or self._pins:
            return False
        if _try_lock(self._pin_fd, fcntl.LOCK_EX):
            fcntl.flock(self._pin_fd, fcntl.LOCK_UN)
            return False
        return True

    def held_beside_by(self, purpose: str) -> bool:
        """Whether another live job of ``purpose`` (``evaluate``, ...) holds this GPU too, by its holder file: its
        untimed GPU work may run beside this job's (a shared hold, or one stepped aside for the moment)."""
        return any(record.get("purpose") == purpose for record in other_holders(self.lock_path.parent, self.gpu))

    def timer_waiting(self) -> bool:
        """Whether a job waits to time on this GPU: it holds the gate exclusively (``upgrade``, ``acquire_gpu``).
        One non-blocking flock on the gate, released at once."""
        if self._gate_fd < 0:
            return False
        if not _try_lock(self._gate_fd, fcntl.LOCK_SH):
            return True
        fcntl.flock(self._gate_fd, fcntl.LOCK_UN)
        return False

    def step_aside(self, poll_s: float, give_up: Callable[[], bool]) -> bool:
        """Shared only: let a job waiting to time on this GPU go first. The shared lock is dropped, then taken again
        through the gate as ``downgrade`` does, once the waiter's timing is done (``lease_yielded`` on the timeline).
        False: ``give_up`` said to stop waiting (the job is ending) and the lease holds nothing any more."""
        assert self.mode == "shared", "only a shared lease steps aside"
        assert not self._pins, "a pinning lease never steps aside"
        start = self._mark("lease_shared")
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        back = self._reenter_shared(poll_s, give_up)
        self._since = self._mark("lease_yielded", start)
        if not back:
            self.mode = "released"
        return back

    def hold_shared_again(self) -> None:
        """A shared lease's lock taken again (blocking: after a timing job's window) where a step-aside failed after
        letting it go; nothing where it is held (flock converts a held lock in place)."""
        if self.mode == "shared":
            fcntl.flock(self._fd, fcntl.LOCK_SH)

    def _reenter_shared(self, poll_s: float, give_up: Callable[[], bool] | None = None) -> bool:
        """The shared lock taken again through the gate: while a timing job waits (it holds the gate) or times (it
        holds the lock), this side waits, so the waiter goes first. False: ``give_up`` returned True first."""
        while True:
            if _shared_through_gate(self._gate_fd, self._fd) is None:
                return True
            if give_up is not None and give_up():
                return False
            time.sleep(poll_s)


@dataclass(frozen=True)
class HoldCounts:
    """A yielding lease's counters at one moment (``YieldingLease.counts``): what it met between two such moments is
    their difference (``since``), e.g. while one answer was its followed tree."""

    incomplete_stops: int = 0
    gpu_held_s: float = 0.0
    cpu_beside_timing_s: float = 0.0
    late_stops: int = 0
    broken_holds: int = 0
    unconfirmed_holds: int = 0

    def since(self, earlier: HoldCounts) -> HoldCounts:
        return HoldCounts(*(now - then for now, then in zip(dataclasses.astuple(self), dataclasses.astuple(earlier))))


class YieldingLease:
    """A shared lease that steps aside for timing jobs (see the module's "Yielding"): the ``with`` block runs a
    watcher thread that, while the lease is shared and a timing job waits on the gate, stops the followed process
    tree (``follow``), lets the timer go first (``GpuLease.step_aside``) and resumes the tree. The job's main thread
    changes the lease's mode only through ``upgrade``/``downgrade`` here: one lock (``_turn``) lets either the
    watcher step aside or the job hold an exclusive window, never both. ``frozen_s``: how long the tree was held
    stopped (or, trusted, its GPU work held), which is no time of the job's (its deadline moves by it).

    ``hold``: how the watcher holds the followed tree while it steps aside (``freezer.Hold``, where the driver can
    lock). ``GPU_HELD``: a tree of trusted code (a baseline's child) has only its GPU work held and its CPU work,
    Inductor's compiling, goes on beside the other job's timing; it is so held for the job's own waits too.
    ``LOCKED_RUNNING``: an answer's locked CUDA processes run on (their kernels' compiling) while every other process
    of it is stopped, rechecked at every poll of the step-aside (``FrozenTree.recheck``); a hold the tree broke pins
    the lease for the rest of the job (``hold_broken`` on the timeline); the job's own waits for its exclusive window
    and its downgrade stop it whole. ``gpu_held_s`` counts the seconds a tree ran on,
    ``stop_spans`` only stops whole; ``cpu_beside_timing_s`` the CPU seconds its locked processes ran meanwhile."""

    def __init__(self, lease: GpuLease, poll_s: float = GATE_POLL_S, steps_aside: bool = True,
                 hold: freezer.Hold = freezer.Hold.STOPPED) -> None:
        self.lease = lease
        self._poll_s = poll_s
        self.steps_aside = steps_aside  # False: no watcher, held blocks run at once; the lease stays shared for the job
        self.hold = hold
        self.gpu_held_s = 0.0  # of frozen_s: the seconds the tree ran on, its GPU work held (not stopped whole)
        self.cpu_beside_timing_s = 0.0  # LOCKED_RUNNING: CPU seconds the tree's locked processes ran while held
        self.late_stops = 0  # LOCKED_RUNNING: processes of the tree stopped as they appeared while it was held
        self.broken_holds = 0  # LOCKED_RUNNING: holds the followed tree broke (``FrozenTree.broken``)
        self.unconfirmed_holds = 0  # LOCKED_RUNNING: holds this side could not confirm (``FrozenTree.unconfirmed``)
        self._hold_broken = False  # the last hold was broken
        self._held: freezer.FrozenTree | None = None  # the tree the watcher holds now (its step-aside rechecks it)
        # Held by the watcher while it looks for a waiting timer and steps aside, by the job from upgrade to
        # downgrade and in ``held`` blocks (re-entrant: a job's held block may take an exclusive window).
        self._turn = threading.RLock()
        # The watcher goes first (``_watcher_turn``): while it waits for the turn, no thread of the job begins a new
        # one (``_take_turn``). Without it, a job whose threads take turns back to back (the start gate's device
        # parts, page-locking, the preparation, each trial's reference) kept the watcher's non-blocking poll out for
        # seconds while a timer waited (s39: one timer 11.3 s).
        self._watcher_waits = False
        self._turn_free = threading.Condition()
        self._turns_here = threading.local()  # ``depth``: the turns the current thread holds (re-entered ones too)
        self._upgraded = False  # the job holds an exclusive window (upgrade ... downgrade)
        self._pid_lock = threading.Lock()  # the followed pid is not changed while its tree is stopped
        self._pid: int | None = None
        self._stop = threading.Event()
        self._frozen_s = 0.0
        self._frozen_since: float | None = None
        self.stop_spans: list[tuple[float, float]] = []  # each stop of the followed tree, ended: (start, end) epoch s
        self._warned = False
        self.incomplete_stops = 0  # stops after which a process of the tree was still running
        self._incomplete_in_a_row = 0  # the watcher's, since its last complete stop
        self._watcher = threading.Thread(target=self._watch, name=f"gpu{lease.gpu}-yield", daemon=True)

    def __enter__(self) -> YieldingLease:
        if self.steps_aside:
            self._watcher.start()
        else:
            self.lease.pin()  # a yielding lease elsewhere on the GPU then stays put while this one keeps timers out
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # a step-aside in progress gives up waiting: the job is ending
        if self.steps_aside:
            self._watcher.join()

    @property
    def gpu(self) -> str:
        return self.lease.gpu

    @property
    def pinned(self) -> bool:
        """Whether the lease pins its GPU (``GpuLease.pin``): never stepping aside, or no longer."""
        return self.lease.pins

    def counts(self) -> HoldCounts:
        return HoldCounts(self.incomplete_stops, self.gpu_held_s, self.cpu_beside_timing_s, self.late_stops,
                          self.broken_holds, self.unconfirmed_holds)

    @property
    def frozen_s(self) -> float:
        """Seconds the followed tree has been held stopped so far (a stop in progress included)."""
        since = self._frozen_since
        return self._frozen_s + (time.monotonic() - since if since is not None else 0.0)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The block runs while the lease is held and no step-aside starts (one in progress ends first): e.g. a
        child started in it and ``follow``ed before the watcher could step aside without stopping it. A lease that
        never steps aside runs it at once (nothing to hold off, and no other block of the job waits on it)."""
        if not self.steps_aside:
            yield
            return
        self._take_turn()
        try:
            yield
        finally:
            self._give_turn()

    def _take_turn(self) -> None:
        """The turn for the current thread of the job; a thread that holds none yet lets a watcher that waits for
        the turn go first (``_watcher_turn``)."""
        depth = getattr(self._turns_here, "depth", 0)
        while True:
            if depth == 0:
                with self._turn_free:
                    self._turn_free.wait_for(lambda: not self._watcher_waits)
            self._turn.acquire()
            if depth or not self._watcher_waits:
                break
            self._turn.release()  # taken as the watcher began to wait for it (another thread's turn was ending)
        self._turns_here.depth = depth + 1

    def _give_turn(self) -> None:
        self._turns_here.depth -= 1
        self._turn.release()

    @contextlib.contextmanager
    def _watcher_turn(self) -> Iterator[bool]:
        """The watcher's turn, taken at once where it is free, else as soon as the job's current one ends (the job
        begins no new one meanwhile); yields False where the lease ended first."""
        got = self._turn.acquire(blocking=False)
        if not got:
            with self._turn_free:
                self._watcher_waits = True
            try:
                while not (got := self._turn.acquire(timeout=self._poll_s)) and not self._stop.is_set():
                    pass
            finally:
                with self._turn_free:
                    self._watcher_waits = False
                    self._turn_free.notify_all()
        try:
            yield got
        finally:
            if got:
                self._turn.release()

    def follow(self, pid: int | None) -> None:
        """The process tree stopped whenever the lease is not held (the job's current child); None: none. Set to
        None before the child is killed, so its pid, once reused, is never stopped."""
        with self._pid_lock:
            self._pid = pid

    # Incomplete stops in a row after which the watcher gives up stepping aside for the rest of the job (it pins the
    # GPU): a process forking as it is stopped (a compile's assembler) leaves one stop incomplete, not three.
    INCOMPLETE_STOPS_BEFORE_PIN = 3
    # Stops of the followed tree an upgrade tries before giving up (``TreeNotHeld``), each resuming it in between: a
    # process that was forking, or a lock that met a trial's last kernels, gets another chance; an honest answer's
    # tree, idle between its calls, is held at the first (none incomplete in s30-s37's GPU runs).
    UPGRADE_STOP_TRIES = 3

    def upgrade(self, timeout_s: float, stop_followed: bool = False) -> float:
        """Exclusive from now (``GpuLease.upgrade``, at most ``timeout_s``: GpuLockTimeout, the lease stays shared),
        once a step-aside in progress has ended; the seconds the upgrade waited. ``stop_followed``: the followed tree
        stopped while it waits (an answer must not run beside another job's timing), and held whole before the shared
        lock is let go (the wait lets another job's timer in first): ``TreeNotHeld`` where it cannot be, the lease
        still shared. The watcher leaves the lease alone until ``downgrade``."""
        if self._upgraded:
            return 0.0
        self._take_turn()
        try:
            for _ in range(self.UPGRADE_STOP_TRIES):
                with self._stopped_tree() if stop_followed else contextlib.nullcontext(True) as complete:
                    # A trusted tree (a baseline's child, its GPU work held where the driver can) is waited for as
                    # it stands: its code leaves no work queued on purpose.
                    if complete or self.hold is freezer.Hold.GPU_HELD:
                        waited = self.lease.upgrade(timeout_s=timeout_s)
                        self._upgraded = True  # from here the window is held: ``downgrade`` gives it back
                        return waited
            # Resumed, the lease still shared: no other job times while the caller ends the tree.
            raise TreeNotHeld(f"GPU {self.lease.gpu}: the followed process tree could not be held off the GPU in "
                              f"{self.UPGRADE_STOP_TRIES} stops")
        except BaseException:
            if not self._upgraded:
                self._give_turn()
            raise

    def downgrade(self) -> None:
        """Shared again (``GpuLease.downgrade``: a timing job already waiting goes first), the followed tree stopped
        while this side has no lock; the watcher may step aside again. Nothing where no window is held."""
        if not self._upgraded:
            return
        try:
            with self._stopped_tree():
                self.lease.downgrade()
        finally:
            self._upgraded = False
            self._give_turn()

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            with self._watcher_turn() as got:
                if not got or not self._looked_for_a_timer():
                    return

    def _looked_for_a_timer(self) -> bool:
        """In the watcher's turn: where the lease is shared and a timing job waits (not kept out by another job's
        pin), the followed tree held and the timer let go first. False: the lease stops stepping aside for the
        rest of the job (it pins its GPU)."""
        try:
            if not (self.lease.mode == "shared" and self.lease.timer_waiting()
                    and not self.lease.timer_blocked_elsewhere()):
                return True
            with self._stopped_tree(self.hold) as complete:
                if complete:
                    try:
                        self._step_aside()
                    except BaseException:
                        self.lease.hold_shared_again()  # before the thaw: the tree runs only with the GPU held
                        raise
            return self._steps_aside_again(complete)
        except (OSError, cuda_lock.UnlockFailed) as e:
            # a lock call failed, or the driver kept the child locked: hold the shared lock again and stop
            # yielding, visibly
            self.lease.hold_shared_again()
            self.lease.pin()  # it keeps the GPU (pinned while shared): yielding leases elsewhere leave the timer
            warnings.warn(f"GPU {self.lease.gpu}: the {self.lease.purpose} job's lease stops stepping aside for "
                          f"timing jobs: {e}", RuntimeWarning, stacklevel=1)
            return False

    def _steps_aside_again(self, complete: bool) -> bool:
        """After a hold of the followed tree (``complete``: held as its hold says): whether the lease may step aside
        again; where not, it pins its GPU from now on."""
        if self._hold_broken:
            # The answer broke its hold beside the timing (its record is rejected, the timeline says when): it is
            # never held beside another job's timing again.
            self.lease.pin()
            warnings.warn(f"GPU {self.lease.gpu}: the {self.lease.purpose} job's followed tree broke its hold while "
                          f"another job timed; its lease stops stepping aside", RuntimeWarning, stacklevel=1)
            return False
        self._incomplete_in_a_row = 0 if complete else self._incomplete_in_a_row + 1
        if self._incomplete_in_a_row:  # a process still runs, or may still have GPU work: no step-aside
            self._warn_once("a process of its child's tree could not be stopped, or its GPU work not held (cuda_lock)")
        if self._incomplete_in_a_row >= self.INCOMPLETE_STOPS_BEFORE_PIN:
            # None for the rest of the job, whose lease pins the GPU as a whole-job lease does: stopping the tree at
            # every poll while the timer waits would only hold the answer back (each stop may wait seconds on the
            # driver), and a driver that exports the lock but refuses it (``yield_gpu: auto`` checks only that it is
            # there) would leave every stop incomplete.
            self.lease.pin()
            return False
        return True

    def _step_aside(self) -> None:
        """Let the waiting timer go first (``GpuLease.step_aside``). A tree whose locked processes run on is
        rechecked at each of the gate's polls meanwhile: a process that appears is stopped before it could make a
        context."""
        if self._held is None or not self._held.runs_on:  # stopped whole: nothing of it runs to recheck
            self.lease.step_aside(REENTRY_POLL_S, self._stop.is_set)
            return
        held = self._held

        def recheck_then_give_up() -> bool:
            held.recheck()
            return self._stop.is_set()

        self.lease.step_aside(self._poll_s, recheck_then_give_up)

    def _warn_once(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"GPU {self.lease.gpu}: the {self.lease.purpose} job's lease did not step aside for a "
                          f"timing job: {why}", RuntimeWarning, stacklevel=2)

    @contextlib.contextmanager
    def _stopped_tree(self, hold: freezer.Hold | None = None) -> Iterator[bool]:
        """The followed tree held for the block (``freezer``): while this job holds no lock its child must touch
        neither the GPU nor the CPU (a trusted child: not the GPU; ``hold`` ``LOCKED_RUNNING``, the watcher's
        step-aside for an answer whose compiling goes on: only its locked processes' CPU); the seconds go to
        ``frozen_s``, the span of a stop whole to ``stop_spans``. Yields whether the tree is ``complete``: every
        process of it seen stopped or locked as its hold says, its GPU work held where the driver can (True where
        nothing is followed). ``hold`` None: stopped whole (a trusted child: its GPU work held)."""
        if hold is None:
            hold = freezer.Hold.GPU_HELD if self.hold is freezer.Hold.GPU_HELD else freezer.Hold.STOPPED
        start = time.time()  # before the stop: stopping a tree of many processes takes a while
        with self._pid_lock:
            if self._pid is None:
                yield True
                return
            # From before the freeze: its locks may wait seconds on the driver (the tree's queued kernels completing,
            # its CPU running on meanwhile), seconds its next reply is not expected in either.
            self._frozen_since = time.monotonic()
            tree: freezer.FrozenTree | None = None  # None still where the freeze itself failed
            try:
                with freezer.frozen(self._pid, hold) as tree:
                    assert tree is not None  # a pid is followed
                    self.incomplete_stops += 0 if tree.complete else 1
                    self._held = tree
                    try:
                        yield tree.complete
                    finally:
                        self._held = None
            finally:
                self._hold_broken = tree is not None and bool(tree.broken)
                if tree is not None:
                    self.cpu_beside_timing_s += tree.cpu_s
                    self.late_stops += tree.late_stops
                    self.unconfirmed_holds += bool(tree.unconfirmed)
                    if tree.broken:
                        self.broken_holds += 1
                        # On the run's timeline: the job timed meanwhile may have met the answer's work.
                        timeline.append(self.lease.lock_path.parent, "hold_broken", self.lease.gpu, start,
                                        time.time(), purpose=self.lease.purpose, reasons=tree.broken[:8])
                # Added before the start is cleared (the thaw is done by now: its unlocks count too): a reader in
                # between over-counts (a later deadline), never under.
                seconds = time.monotonic() - self._frozen_since
                self._frozen_s += seconds
                self._frozen_since = None
                if tree is None or tree.stops:
                    self.stop_spans.append((start, time.time()))
                else:  # it ran on: no stop to leave out of its compile time
                    self.gpu_held_s += seconds


@contextlib.contextmanager
def yielding(lease: GpuLease | None, steps_aside: bool = True,
             hold: freezer.Hold = freezer.Hold.STOPPED) -> Iterator[YieldingLease | None]:
    """``lease`` as a ``YieldingLease`` for the ``with`` block (one that never steps aside where ``steps_aside`` is
    False; one whose tree is held as ``hold`` says while it steps aside); None where no lease is taken (the CPU)."""
    if lease is None:
        yield None
        return
    with YieldingLease(lease, steps_aside=steps_aside, hold=hold) as yielding_lease:
        yield yielding_lease


def visible_gpus(configured: Sequence[str | int] | None = None) -> list[str]:
    if configured:
        return [str(g) for g in configured]
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
            n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
            if n:
                return [str(i) for i in range(n)]
        except (OSError, subprocess.SubprocessError):
            pass
    try:  # last resort: a child process, so this process stays CUDA-free
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                             capture_output=True, text=True, timeout=120)
        return [str(i) for i in range(int(out.stdout.strip().splitlines()[-1]))]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return []


def _safe(gpu: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in gpu)


def _holder_path(lock_dir: Path, gpu: str, slot: int) -> Path:
    return lock_dir / f"gpu{_safe(gpu)}.holder{slot}"


def _holder_count(lock_dir: Path, gpu: str) -> int:
    """How many jobs hold this GPU now (their slot files are locked)."""
    count = 0
    for slot in range(HOLDER_SLOTS):
        path = _holder_path(lock_dir, gpu, slot)
        if not path.exists():
            break  # slots are taken lowest first
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if _try_lock(fd, fcntl.LOCK_EX):
                fcntl.flock(fd, fcntl.LOCK_UN)
            else:
                count += 1
        finally:
            os.close(fd)
    return count


def _take_holder_slot(lock_dir: Path, gpu: str) -> int:
    """Lock the lowest free slot file of the GPU and return its descriptor (-1 when all are taken)."""
    for slot in range(HOLDER_SLOTS):
        fd = os.open(_holder_path(lock_dir, gpu, slot), os.O_RDWR | os.O_CREAT, 0o666)
        if _try_lock(fd, fcntl.LOCK_EX):
            return fd
        os.close(fd)
    return -1


@contextlib.contextmanager
def _selection_lock(lock_dir: Path) -> Iterator[None]:
    """Held for the few milliseconds a job counts the GPUs' holders and reserves its slot."""
    fd = os.open(lock_dir / "select.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the file releases its lock


def _try_lock(fd: int, op: int) -> bool:
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _holder_file(lock_dir: Path, gpu: str, pid: int) -> Path:
    return lock_dir / f"gpu{_safe(gpu)}.{pid}.json"


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process
    return True


def other_holders(lock_dir: Path, gpu: str) -> list[dict[str, Any]]:
    """The holder files of the GPU's other live holders (mode, purpose, expected memory)."""
    records = []
    for info in lock_dir.glob(f"gpu{_safe(gpu)}.*.json"):
        try:
            record = json.loads(info.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("pid") == os.getpid() or not _alive(record.get("pid")):
            continue  # this job's own, or left by a holder that died
        records.append(record)
    return records


def promised_gib(lock_dir: Path, gpu: str) -> tuple[float, int]:
    """(GiB the GPU's other live holders expect to use, how many they are), from their holder files."""
    records = other_holders(lock_dir, gpu)
    return sum(float(record.get("expected_mem_gib") or 0.0) for record in records), len(records)


def _admits(lock_dir: Path, gpu: str, need_gib: float | None, capacity_gib: Callable[[str], float | None] | None
            ) -> bool:
    """Memory admission: the GPU takes a job that says what it expects to use while its other holders' expectations
    and this one fit DEVICE_SHARE of its memory, or when it has no other holder (a problem larger than the card
    runs alone)."""
    capacity = capacity_gib(gpu) if need_gib is not None and capacity_gib is not None else None
    if capacity is None:
        return True
    promised, holders = promised_gib(lock_dir, gpu)
    return holders == 0 or promised + float(need_gib or 0.0) <= DEVICE_SHARE * capacity


@contextlib.contextmanager
def acquire_gpu(
    exclusive: bool,
    gpus: Sequence[str | int] | None = None,
    lock_dir: Path | str = DEFAULT_LOCK_DIR,
    timeout_s: float | None = None,
    poll_s: float | None = None,
    expected_mem_gib: float | None = None,
    capacity_gib: Callable[[str], float | None] | None = None,
    purpose: str = "job",
) -> Iterator[GpuLease]:
    """Hold one GPU (exclusive for timing, shared for correctness-only) for the ``with`` block. ``gpus``: the
    candidates (e.g. ``[N]`` for ``--gpu-index N``); default: all visible GPUs. With ``expected_mem_gib`` and
    ``capacity_gib`` (a GPU's memory in GiB), a GPU is taken only while that memory admits the job (``_admits``):
    jobs started by hand side by side wait for room instead of failing out of memory. ``poll_s``: the rounds' interval
    (``HANDOVER_POLL_S`` for an exclusive job, ``ENTRY_POLL_S`` for a shared one where not given)."""
    poll_s = poll_s if poll_s is not None else HANDOVER_POLL_S if exclusive else ENTRY_POLL_S
    capacity_gib = functools.cache(capacity_gib) if capacity_gib is not None else None  # read once per GPU
    cands = [str(g) for g in gpus] if gpus else visible_gpus()
    if not cands:
        raise RuntimeError("no visible GPU to lock")
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    mode = "exclusive" if exclusive else "shared"
    op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    fds = {g: os.open(lock_dir / f"gpu{_safe(g)}.lock", os.O_RDWR | os.O_CREAT, 0o666) for g in cands}
    gates = {g: os.open(lock_dir / f"gpu{_safe(g)}.gate", os.O_RDWR | os.O_CREAT, 0o666) for g in cands}
    pins = {g: os.open(lock_dir / f"gpu{_safe(g)}.pin", os.O_RDWR | os.O_CREAT, 0o666) for g in cands}
    t0, wall_t0 = time.monotonic(), time.time()
    refused = {"memory": 0, "gate": 0, "lock": 0}  # polling rounds' refusals, by what refused (the timeline says)
    start = os.getpid() % len(cands)
    rotated = cands[start:] + cands[:start]
    chosen: str | None = None
    holder_fd = -1
    held_gate: str | None = None
    try:
        # Count the holders and reserve a slot on the least held GPU in one step, under the folder's selection lock:
        # jobs started at the same moment otherwise all counted none anywhere and piled onto one GPU (1 round in 3,
        # 4 jobs on 2 GPUs, before this lock).
        with _selection_lock(lock_dir):
            holders = {g: _holder_count(lock_dir, g) for g in rotated}
            order = sorted(rotated, key=lambda g: holders[g])  # stable: ties keep the pid's rotation
            reserved = order[0]
            holder_fd = _take_holder_slot(lock_dir, reserved)
        while chosen is None:
            for g in order:
                if not exclusive and (busy := _shared_through_gate(gates[g], fds[g], keep=False)):
                    refused[busy] += 1  # seen without the selection lock, which every waiting job's round would take
                    continue
                # Memory admission and this job's holder file (what it expects to use) in one step, so two jobs
                # never both fit into the same free memory.
                with _selection_lock(lock_dir) if expected_mem_gib is not None else contextlib.nullcontext():
                    if not _admits(lock_dir, g, expected_mem_gib, capacity_gib):
                        refused["memory"] += 1
                        continue
                    if exclusive:
                        # Hold the gate of the first GPU we wait on, so shared jobs queue behind us there.
                        if held_gate is None and _try_lock(gates[g], fcntl.LOCK_EX):
                            held_gate = g
                        ok = _try_lock(fds[g], op)
                        refused["lock"] += not ok
                    else:
                        busy = _shared_through_gate(gates[g], fds[g])
                        ok = busy is None
                        if busy:
                            refused[busy] += 1
                    if ok:
                        chosen = g
                        _write_info(lock_dir, g, mode, expected_mem_gib, purpose)
                        break
            if chosen is None:
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    raise GpuLockTimeout(f"no GPU of {cands} free ({mode}) after {timeout_s:.0f}s")
                time.sleep(poll_s)
        if held_gate is not None:
            fcntl.flock(gates[held_gate], fcntl.LOCK_UN)
            held_gate = None
        if chosen != reserved:  # another GPU was free first: the slot moves there
            if holder_fd >= 0:
                os.close(holder_fd)
            holder_fd = _take_holder_slot(lock_dir, chosen)
        # How long the job waited to get onto its GPU, and what kept it off (memory admission, the gate of a
        # waiting timer, the lock itself), so a run's timeline shows jobs queued behind the GPU as well as on it.
        # What memory admission counted this job for while it held the GPU, beside the ceiling it admits to: a run
        # whose declared memory fills the card is bound by its declarations, not by the GPU's time (gpu_timeline).
        # On the entry's line too: a job killed while holding (a call cut off) writes no lease_held.
        capacity = capacity_gib(chosen) if capacity_gib is not None and expected_mem_gib is not None else None
        admission = {"declared_gib": expected_mem_gib,
                     "admits_gib": None if capacity is None else round(DEVICE_SHARE * capacity, 3)}
        held_from = time.time()
        timeline.append(lock_dir, "lease_acquire", chosen, wall_t0, held_from, purpose=purpose, mode=mode,
                        refused=refused, **admission)
        lease = GpuLease(gpu=chosen, mode=mode, lock_path=lock_dir / f"gpu{_safe(chosen)}.lock",
                         waited_s=time.monotonic() - t0, _fd=fds[chosen], _gate_fd=gates[chosen],
                         _pin_fd=pins[chosen],
                         _info_path=_holder_file(lock_dir, chosen, os.getpid()), purpose=purpose)
        try:
            yield lease
        finally:
            if lease.mode != "released":  # a lease that gave up re-entering wrote its last interval then
                lease._mark(f"lease_{lease.mode}")
            timeline.append(lock_dir, "lease_held", chosen, held_from, time.time(), purpose=purpose, **admission)
    finally:
        for fd in fds.values():
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        for fd in [*gates.values(), *pins.values()]:
            os.close(fd)  # a pin held goes with its file
        if holder_fd >= 0:
            os.close(holder_fd)  # closing the file releases its lock
        if chosen is not None:
            with contextlib.suppress(OSError):
                _holder_file(lock_dir, chosen, os.getpid()).unlink()


def _shared_through_gate(gate_fd: int, lock_fd: int, keep: bool = True) -> str | None:
    """The GPU's lock taken shared through its gate (none where ``gate_fd`` < 0), with non-blocking flocks: None once
    taken (and released again unless ``keep``: a probe, only a hint), else what refused: ``"gate"`` where a timer waits
    (so new shared jobs queue behind it), ``"lock"`` where one times."""
    if gate_fd >= 0 and not _try_lock(gate_fd, fcntl.LOCK_SH):
        return "gate"
    try:
        if not _try_lock(lock_fd, fcntl.LOCK_SH):
            return "lock"
        if not keep:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
    finally:
        if gate_fd >= 0:
            fcntl.flock(gate_fd, fcntl.LOCK_UN)
    return None


def _write_info(lock_dir: Path, gpu: str, mode: str, expected_mem_gib: float | None, purpose: str) -> None:
    """The holder file: for operators, what memory admission adds up, and who else holds the GPU (``purpose``)."""
    with contextlib.suppress(OSError):
        _holder_file(lock_dir, gpu, os.getpid()).write_text(json.dumps(
            {"pid": os.getpid(), "mode": mode, "since": time.time(), "expected_mem_gib": expected_mem_gib,
             "purpose": purpose}))


def host_locks(folder: Path | str) -> Path:
    """The lock folder of this host under a configuration's locks folder: locks name GPUs as the host sees them, so
    cluster nodes sharing the folder never contend for "gpu0"."""
    return Path(folder) / socket.gethostname()


@contextlib.contextmanager
def hold_gpus(gpus: Sequence[str | int], lock_dir: Path | str, timeout_s: float | None = None
              ) -> Iterator[list[GpuLease]]:
    """Every GPU of ``gpus`` held exclusively for the ``with`` block, each taken in order (sorted, so two holders of
    overlapping sets never wait on each other): a job that runs on them without timing, such as a vLLM engine, and
    beside which nothing may be timed or judged."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(acquire_gpu(exclusive=True, gpus=[gpu], lock_dir=lock_dir, timeout_s=timeout_s,
                                               purpose=GENERATION_PURPOSE))
               for gpu in sorted({str(g) for g in gpus})]


@contextlib.contextmanager
def lease_for_job(device: str, gpu_index: int | None, gpus: Sequence[str | int] | None, lock_dir: Path | str,
                  exclusive: bool, expected_mem_gib: float | None = None, purpose: str = "job"
                  ) -> Iterator[GpuLease | None]:
    """The GPU lease of one evaluation or baseline job: none on the CPU; on CUDA the configured GPU (or any of the
    candidates), shared for correctness work or exclusive for timing, once its expected memory fits there."""
    if device != "cuda":
        yield None
        return
    from workflow_scripts.evaluation.environment import gpu_memory_gib

    candidates = [str(gpu_index)] if gpu_index is not None else gpus
    with acquire_gpu(exclusive=exclusive, gpus=candidates, lock_dir=lock_dir, expected_mem_gib=expected_mem_gib,
                     capacity_gib=gpu_memory_gib, purpose=purpose) as lease:
        yield lease
