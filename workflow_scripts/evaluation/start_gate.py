"""When answer processes may create their CUDA contexts: one at a time, and never while an answer is timed.

An answer's process is started ahead of its answer (``answer.ProblemEvaluator.start_slot``) in two parts. Its host
part (interpreter, torch, Triton and the C helpers of Triton's driver) runs at once, beside the other processes';
then the process reports ``staged`` and waits. Its device part (the CUDA context, the L2 flush buffer, Triton's
driver bound to the device) begins only when this gate sends ``go``; the process reports ``device_ready`` when it is
done. A context created while an answer is timed could disturb that timing, so before this gate every process of a
batch had to be ready before the first timing: on an H200, 15 processes started together took 7.7 s to be ready (one
alone 2.3 s). The gate starts the device parts one at a time in the gaps instead: while the problem is prepared,
while answers load and are checked for correctness. Measured on the H200 with the gate (bench/NOTES.md, eleventh
session): a device part takes about 0.2 s, a host part 3 s alone and 5-7 s when 15 start together.

Before an answer is timed, ``pause`` waits until no device part is under way and every started process has finished
its host part (so nothing of a process's start competes with the timing for the host either); until ``resume`` no
device part begins. Processes go in the order they were started, which is the order their answers are evaluated in.

Who reads a process's channel: this gate's thread, from its start until its device part is done, and until its
``hello`` too when its memory areas were already delivered by then (page-locking them is driver work as well); the
evaluator from then on (``wait_ready`` hands a process over). A message other than the expected one (a setup error)
is kept as the process's ``hello``, for the evaluator to report. A process the evaluator ends before it was handed
over is ``forget``-ten first, so this thread never reads or writes a closed channel.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from workflow_scripts.evaluation.channel import ChildDied, ChildTimeout, Message, ProtocolError
from workflow_scripts.evaluation.sandbox import ChildProcess

POLL_S = 0.05  # how often the gate's thread looks up from a channel to see whether it should stop reading it


@dataclass(eq=False)
class _Entry:
    child: ChildProcess
    staged: bool = False  # its host part is done (or it failed, or was forgotten)
    handed: bool = False  # its device part is done (or ...): the evaluator reads its channel from now on
    failed: bool = False
    dropped: bool = False  # forgotten: the evaluator ends it


class StartGate:
    """The device parts of the answer processes of one problem, one at a time, never during a timing."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s  # for each part of a process's start
        self._cond = threading.Condition()
        self._entries: list[_Entry] = []
        self._paused = False
        self._busy = False  # a device part (or page-locking right after it) is under way
        self._using: _Entry | None = None  # the entry whose channel the thread touches now
        self._closed = False
        # (event, time.monotonic(), process number) in order: "go" / "ready" (a device part's start and end),
        # "pause" (returned: from here the GPU is quiet) / "resume". What the tests check the gate's promise on.
        self.history: list[tuple[str, float, int]] = []
        self._thread = threading.Thread(target=self._run, name="start-gate", daemon=True)
        self._thread.start()

    # -- the evaluator's side ---------------------------------------------------------------------------------------
    def add(self, child: ChildProcess) -> None:
        """A process just started with ``start_gate`` in its init: it will report ``staged``."""
        with self._cond:
            self._entries.append(_Entry(child))
            self._cond.notify_all()

    def wait_ready(self, child: ChildProcess, timeout_s: float | None = None) -> float:
        """Wait until ``child`` is handed over (its device part is done, or its start failed); the seconds waited.
        The gate must not be paused. After ``timeout_s`` it is taken over as it is (``forget``): the caller then
        reads its channel alone, and a process that never got to start its device part never says hello."""
        t0 = time.monotonic()
        with self._cond:
            entry = self._entry(child)
            handed = self._cond.wait_for(lambda: entry.handed or self._closed,
                                         timeout=self.timeout_s if timeout_s is None else timeout_s)
        if not handed:
            self.forget(child)
        return time.monotonic() - t0

    def pause(self, timeout_s: float) -> float:
        """Before a timing: no device part begins from now on, and this returns once none is under way and every
        started process has finished its host part (and the processes handed over with their areas delivered have
        page-locked them). Returns the seconds waited."""
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        with self._cond:
            self._paused = True
            self._cond.wait_for(lambda: self._closed or (not self._busy and all(e.staged for e in self._entries)),
                                timeout=timeout_s)
            handed = [e.child for e in self._entries if e.handed and not (e.failed or e.dropped)]
        for child in handed:  # ours to read now
            if child.hello is None and child.areas_delivered and not child.killed:
                try:
                    child.await_hello(max(deadline, time.monotonic() + 1.0))
                except (ChildDied, ChildTimeout, ProtocolError):
                    pass  # its own evaluation reports it
        with self._cond:
            self.history.append(("pause", time.monotonic(), -1))
        return time.monotonic() - t0

    def resume(self) -> None:
        with self._cond:
            if self._paused:
                self.history.append(("resume", time.monotonic(), -1))
            self._paused = False
            self._cond.notify_all()

    def forget(self, child: ChildProcess) -> None:
        """The evaluator is about to end ``child``: this thread leaves its channel alone from now on."""
        with self._cond:
            entry = self._entry(child)
            entry.dropped = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._using is not entry)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _entry(self, child: ChildProcess) -> _Entry:
        for entry in self._entries:
            if entry.child is child:
                return entry
        raise KeyError("a process the start gate was never given")

    # -- the gate's thread ------------------------------------------------------------------------------------------
    def _run(self) -> None:
        staged_next = started_next = 0
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    if not self._paused and started_next < staged_next:
                        entry, start = self._entries[started_next], True
                        started_next += 1
                        self._busy = not (entry.failed or entry.dropped)
                        break
                    if staged_next < len(self._entries):
                        entry, start = self._entries[staged_next], False
                        staged_next += 1
                        break
                    self._cond.wait()
            if start:
                ok = not (entry.failed or entry.dropped) and self._device_part(entry)
                with self._cond:
                    entry.handed = True
                    entry.failed = entry.failed or not ok
                    self._busy = False
                    self._cond.notify_all()
            else:
                ok = self._expect(entry, "staged")
                with self._cond:
                    entry.staged = True
                    entry.failed = entry.failed or not ok
                    self._cond.notify_all()

    def _device_part(self, entry: _Entry) -> bool:
        if not self._send_go(entry):
            return False
        ok = self._expect(entry, "device_ready")
        if ok and entry.child.areas_delivered:
            ok = self._expect(entry, "hello")  # page-locking its areas is part of its start
        with self._cond:
            self.history.append(("ready", time.monotonic(), self._entries.index(entry)))
        return ok

    def _send_go(self, entry: _Entry) -> bool:
        with self._cond:
            if entry.dropped or self._closed:
                return False
            self.history.append(("go", time.monotonic(), self._entries.index(entry)))
            entry.child.send("go")
        return True

    def _expect(self, entry: _Entry, kind: str) -> bool:
        """Read ``entry``'s next message, expecting ``kind``; False (the message kept as its hello when it is another
        one) when it is not, when the process died or timed out, or when the evaluator dropped it meanwhile."""
        child = entry.child
        deadline = time.monotonic() + self.timeout_s
        while True:
            with self._cond:
                if entry.dropped or self._closed:
                    return False
                self._using = entry
            try:
                if child.readable(POLL_S):
                    msg: Message = child.recv(deadline)
                    if kind == "hello":
                        child.hello = msg
                    elif msg.type != kind:
                        child.hello = msg  # a setup error: the evaluator reports it
                    return msg.type == kind
            except (ChildDied, ChildTimeout, ProtocolError):
                return False
            finally:
                with self._cond:
                    self._using = None
                    self._cond.notify_all()
            if time.monotonic() > deadline:
                return False
