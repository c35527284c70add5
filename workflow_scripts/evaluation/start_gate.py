"""When answer processes may create their CUDA contexts: one at a time, and never while an answer is timed.

An answer's process is started ahead of its answer (``answer.ProblemEvaluator.start_slot``) in two parts. Its host
part (interpreter, torch, Triton and the C helpers of Triton's driver) runs at once, beside the other processes';
then the process reports ``staged`` and waits. Its device part (the CUDA context, the L2 flush buffer, Triton's
driver bound to the device) begins only when this gate sends ``go``; the process reports ``device_ready`` when it is
done. A context created while an answer is timed could disturb that timing, so before this gate every process of a
batch had to be ready before the first timing: on an H200, 15 processes started together took 7.7 s to be ready (one
alone 2.3 s). The gate starts the device parts one at a time in the gaps instead: while the problem is prepared,
while answers load and are checked for correctness. Measured on the H200 with the gate (bench/archive/NOTES.md, eleventh
session): a device part takes about 0.2 s, a host part 3 s alone and 5-7 s when 15 start together.

Before an answer is timed, ``pause`` waits until no device part is under way and every started process has finished
its host part (so nothing of a process's start competes with the timing for the host either); until ``resume`` no
device part begins. Processes go in the order they were started, which is the order their answers are evaluated in.

Who reads a process's channel: this gate's thread, from its start until its device part is done, and until its
``hello`` too when its memory areas were already delivered by then (page-locking them is driver work as well); the
evaluator from then on (``wait_ready`` hands a process over). A message other than the expected one (a setup error)
is kept as the process's ``hello``, for the evaluator to report. A process the evaluator ends before it was handed
over is ended through ``drop``, so this thread never reads or writes a closed channel.

No part of a start can hold the GPU or the timing back for long: a process whose host part or device part does not
finish within the gate's bound (the answer's timeout; no answer code has run in it yet) is killed, and its ``hello``
becomes a setup error, which the evaluator reports as an infrastructure failure, never as the answer's.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workflow_scripts.evaluation.channel import ChildDied, ChildTimeout, Message, ProtocolError
from workflow_scripts.evaluation.sandbox import ChildProcess

POLL_S = 0.05  # how often the gate's thread looks up from a channel to see whether it should stop reading it


@dataclass(eq=False)
class _Entry:
    child: ChildProcess
    added_at: float = field(default_factory=time.monotonic)
    staged: bool = False  # its host part is done (or it failed, or was dropped)
    handed: bool = False  # its device part is done (or ...): the evaluator reads its channel from now on
    failed: bool = False
    dropped: bool = False  # ``drop``: the evaluator ends it, the gate's thread leaves its channel
    ended: bool = False  # dropped and killed


class StartGate:
    """The device parts of the answer processes of one problem, one at a time, never during a timing."""

    def __init__(self, timeout_s: float,
                 gpu_turn: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext) -> None:
        self.timeout_s = timeout_s  # for each part of a process's start: past it the process is killed
        # Each device part runs in one: never while the job's lease stands aside for another job's timing.
        self._gpu_turn = gpu_turn
        self._cond = threading.Condition()
        self._entries: list[_Entry] = []
        self._next_start = 0  # the index of the next entry whose device part begins (in order)
        self._paused = False
        self._busy = False  # a device part (or page-locking right after it) is under way, or its process not dead
        self._using: _Entry | None = None  # the entry whose channel the thread touches now
        self._pinning: list[threading.Thread] = []  # the trusted side page-locking a process's areas
        self._closed = False
        # (event, time.monotonic(), process number) in order: "go" / "ready" (a device part's start and end),
        # "killed" (a start past its time), "pause" (returned: from here the GPU is quiet) / "resume". What the
        # tests check the gate's promise on.
        self.history: list[tuple[str, float, int]] = []
        self._thread = threading.Thread(target=self._run, name="start-gate", daemon=True)
        self._thread.start()

    # -- the evaluator's side ---------------------------------------------------------------------------------------
    def add(self, child: ChildProcess) -> None:
        """A process just started with ``start_gate`` in its init: it will report ``staged``."""
        with self._cond:
            self._entries.append(_Entry(child))
            self._cond.notify_all()

    def track_pinning(self, thread: threading.Thread) -> None:
        """The trusted side page-locking a process's areas (driver work, like a device part): ``pause`` waits for
        it too."""
        with self._cond:
            self._pinning.append(thread)

    def wait_ready(self, child: ChildProcess, timeout_s: float | None = None) -> float:
        """Wait until ``child`` is handed over (its device part is done, or its start failed: then its ``hello`` says
        why); the seconds waited. The gate must not be paused. A process not handed over after ``timeout_s`` (by
        default the gate's own bound, which its thread enforces on each part of the start) is killed, its ``hello``
        a setup error."""
        t0 = time.monotonic()
        with self._cond:
            entry = self._entry(child)
            handed = self._cond.wait_for(lambda: entry.handed or self._closed,
                                         timeout=2 * self.timeout_s + 5.0 if timeout_s is None else timeout_s)
        if not handed and not self._closed:
            self.drop(child, f"not ready {time.monotonic() - t0:.0f} s after the evaluator needed it")
        return time.monotonic() - t0

    def pause(self) -> float:
        """Before a timing: no device part begins from now on, and this returns once none is under way, every
        started process has finished its host part, the trusted side has page-locked the areas it gave them and the
        processes handed over with their areas have page-locked theirs (their ``hello``). A process that does not
        get there within the gate's bound is killed (its ``hello`` says so), so the GPU is quiet when this returns.
        Returns the seconds waited."""
        t0 = time.monotonic()
        with self._cond:
            self._paused = True
            self._cond.wait_for(lambda: self._closed or (not self._busy and all(e.staged for e in self._entries)))
            handed = [e.child for e in self._entries if e.handed and not (e.failed or e.dropped)]
            pinning, self._pinning = self._pinning, []
        for thread in pinning:
            thread.join()
        for child in handed:  # ours to read now
            if child.hello is None and child.areas_delivered and not child.killed:
                try:
                    child.await_hello(time.monotonic() + self.timeout_s)
                except (ChildDied, ChildTimeout, ProtocolError, OSError) as e:
                    _end(child, f"its areas were not page-locked within {self.timeout_s:.0f} s "
                                f"({type(e).__name__})")
        with self._cond:
            self.history.append(("pause", time.monotonic(), -1))
        return time.monotonic() - t0

    def resume(self) -> None:
        with self._cond:
            if self._paused:
                self.history.append(("resume", time.monotonic(), -1))
            self._paused = False
            self._cond.notify_all()

    def drop(self, child: ChildProcess, reason: str | None = None) -> None:
        """End ``child`` (the evaluator no longer needs it, or it is not ready in time: then ``reason`` becomes its
        ``hello``, a setup error): the gate's thread leaves its channel first, and counts a device part it had begun
        as under way until the process is dead."""
        with self._cond:
            entry = self._entry(child)
            entry.dropped = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._using is not entry)
        if reason is not None and child.hello is None:
            child.hello = _setup_error(reason)
        child.kill()
        with self._cond:
            entry.ended = True
            entry.staged = True
            entry.handed = True
            entry.failed = True
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        for thread in self._pinning:
            thread.join()

    def _entry(self, child: ChildProcess) -> _Entry:
        for entry in self._entries:
            if entry.child is child:
                return entry
        raise KeyError("a process the start gate was never given")

    # -- the gate's thread ------------------------------------------------------------------------------------------
    def _startable(self) -> _Entry | None:
        """The next entry in order, when its device part may begin now, or when it has none (its start failed, or
        it was dropped: handed over at once, paused or not). With ``self._cond`` held."""
        if self._next_start >= len(self._entries):
            return None
        entry = self._entries[self._next_start]
        if not entry.staged or (self._paused and not (entry.failed or entry.dropped)):
            return None
        return entry

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    entry = self._startable()
                    if entry is not None:
                        self._next_start += 1
                        action = "skip" if entry.failed or entry.dropped else "start"
                        self._busy = action == "start"
                        break
                    pending = [e for e in self._entries if not e.staged]
                    if pending:
                        entry, action = pending[0], "stage"
                        break
                    self._cond.wait()
            if action == "stage":
                # Its host part: while an earlier process may begin its device part, that one goes first.
                got = self._expect(entry, "staged", entry.added_at + self.timeout_s, yield_to_start=True)
                if got is not None:
                    with self._cond:
                        entry.staged = True
                        entry.failed = entry.failed or not got
                        self._cond.notify_all()
                continue
            with self._gpu_turn():
                ok = action == "start" and self._device_part(entry)
            with self._cond:
                # A process dropped while its device part ran counts as under way until ``drop`` has killed it.
                self._cond.wait_for(lambda entry=entry: not entry.dropped or entry.ended or self._closed)
                entry.handed = True
                entry.failed = entry.failed or not ok
                self._busy = False
                self._cond.notify_all()

    def _device_part(self, entry: _Entry) -> bool:
        if not self._send_go(entry):
            return False
        deadline = time.monotonic() + self.timeout_s
        ok = self._expect(entry, "device_ready", deadline)
        if ok and entry.child.areas_delivered:
            ok = self._expect(entry, "hello", deadline)  # page-locking its areas is part of its start
        with self._cond:
            self.history.append(("ready", time.monotonic(), self._entries.index(entry)))
        return bool(ok)

    def _send_go(self, entry: _Entry) -> bool:
        with self._cond:
            if entry.dropped or self._closed:
                return False
            self.history.append(("go", time.monotonic(), self._entries.index(entry)))
            entry.child.send("go")
        return True

    def _expect(self, entry: _Entry, kind: str, deadline: float, yield_to_start: bool = False) -> bool | None:
        """Read ``entry``'s next message, expecting ``kind``: True when it came; False when another one came (kept
        as its hello: a setup error), when the process died, when the evaluator dropped it, or at ``deadline``
        (the process is killed then, its hello saying why); None, nothing read, when ``yield_to_start`` and an
        earlier process may begin its device part."""
        child = entry.child
        while True:
            with self._cond:
                if entry.dropped or self._closed:
                    return False
                if yield_to_start and self._startable() is not None:
                    return None
                self._using = entry
            try:
                if child.readable(POLL_S):
                    msg: Message = child.recv(deadline)
                    if kind == "hello" or msg.type != kind:
                        child.hello = msg  # the hello, or a setup error: the evaluator reports it
                    return msg.type == kind
                if time.monotonic() > deadline:  # killed while this thread holds the channel: never twice at once
                    with self._cond:
                        self.history.append(("killed", time.monotonic(), self._entries.index(entry)))
                    part = "host part" if kind == "staged" else "device part"
                    _end(child, f"its {part} did not finish within {self.timeout_s:.0f} s")
                    return False
            except (ChildDied, ChildTimeout, ProtocolError, OSError):
                return False
            finally:
                with self._cond:
                    self._using = None
                    self._cond.notify_all()


def _setup_error(reason: str) -> Message:
    return Message({"type": "setup_error", "error": f"the answer process's start failed: {reason}"})


def _end(child: ChildProcess, reason: str) -> None:
    """Kill a process whose start failed; its ``hello`` (unless it said one) tells the evaluator why."""
    if child.hello is None:
        child.hello = _setup_error(reason)
    child.kill()
