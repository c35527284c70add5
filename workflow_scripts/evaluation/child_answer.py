"""The answer role of an evaluation child: the untrusted ``ModelNew`` loaded and called in a process of its own
(trust model in ``workflow_scripts.evaluation``). It never imports the problem module: its inputs come from the
trusted side through memory areas, and its outputs go back the same way, to be judged there.

``AnswerRole`` sets up the monitors (``integrity.Guard``, ``integrity.LaunchCounter``) and the identity snapshot
(``tamper.TamperCheck``) before the answer exists in the process, then loads the answer and serves the trusted side's
commands, one method each: ``trial`` (a correctness call), ``time`` (a block of timed calls), ``probe`` (the same
loop with a trusted stand-in, ``OverheadProbe``, for the trusted side's bound on reported times), ``post_timing`` (the
timed inputs overwritten in place, one more call) and ``finish`` (the done message). Everything the role calls
on torch and on its own objects was captured before the answer was imported; its methods are bound into its instance
(``integrity.pin_methods``), and its attributes, its class and its module are part of the snapshot.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from workflow_scripts.evaluation.channel import exception_text, read_command
from workflow_scripts.evaluation.integrity import HARNESS_MODULES, PACKAGE, Guard, LaunchCounter, pin_methods
from workflow_scripts.evaluation.tamper import TamperCheck, code_getters
from workflow_scripts.evaluation.transport import torch_dtype

# Attributes of the launch counter that counting itself changes: not part of the snapshot.
LAUNCH_COUNTING = ("count", "_programs", "empty_grid", "_bare")
JSON_MODULES = ("json", "json.encoder", "json.decoder", "json.scanner")


@dataclass
class _TimingState:
    """The timing inputs, loaded by the first timing block and checked against their snapshot by every block; the
    post-timing call overwrites them in place."""

    inputs: list[Any] | None = None
    snapshot: list[Any] = field(default_factory=list)
    # The seed of the next timed call's fresh inputs (from the block's command, then from each reply): drawn into
    # ``inputs`` in place right before that call, outside its window.
    next_seed: int | None = None


class OverheadProbe:
    """A trusted stand-in for the answer in the timing loop (``protocol.PROBE_CALLS``): each call allocates outputs of
    the reference's kinds, as an answer allocates its own, and launches nothing. The trusted side's observed
    intervals around these calls, less their reported times, are what the loop itself costs: its bound for the
    answer's calls starts there."""

    def __init__(self, empty: Callable[..., Any], specs: list[tuple[tuple[int, ...], Any]], structure: str,
                 device: Any) -> None:
        self.empty, self.specs, self.structure, self.device = empty, specs, structure, device

    def __call__(self, *inputs: Any) -> Any:
        outs = [self.empty(shape, dtype=dtype, device=self.device) for shape, dtype in self.specs]
        return outs[0] if self.structure == "tensor" and len(outs) == 1 else tuple(outs)


class AnswerRole:
    """One answer's process, from its monitors to its done message (``run``)."""

    def __init__(self, child: Any, init: dict[str, Any]) -> None:
        child.receive_areas()  # before the monitors: the areas' socket is the harness's own
        self.c = child
        self.sender = child.sender
        self.stdin = child.stdin
        # The answer arrives with the command that loads it and is written here, into this process's own folder: no
        # host file holds it where another answer's process could look (confinement).
        self.answer_file = os.path.join(init["workdir"], init["answer"])
        self.launch = LaunchCounter()
        env = os.environ
        self.guard = Guard(self.sender, init["workdir"], self.answer_file, allowed_spawn_pkgs=("triton",),
                           generated_dirs=tuple(env[k] for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
                                                if k in env))
        self.launch.attach(self.guard)  # launches are counted from the audit events the guard receives
        # What the role calls, captured now, before the answer exists in this process.
        torch = child.torch
        self.is_cuda = child.device_kind == "cuda"
        self.sync = torch.cuda.synchronize if self.is_cuda else None
        self.clone, self.equal_bits, self.storage = child.clone, child.bitwise_equal, child.untyped_storage
        self.type_of, self.Tensor, self.is_instance = child._type, child.Tensor, child._isinstance
        self.perf = child.clock.perf_counter
        self.empty = torch.empty
        self.flags: list[str] = []
        self.timed = _TimingState()
        # The harness's own objects call their methods through their instance dicts (see integrity.pin_methods).
        pin_methods(child)
        pin_methods(child.clock)
        pin_methods(self)
        self.threads_before = {t.ident for t in threading.enumerate()}
        sys.addaudithook(self.guard.hook)  # cannot be removed from Python code
        self.guard.enforcing = True
        self.tamper = TamperCheck(torch, self._snapshot_getters(), self.launch)
        self.tamper.watch("role.tamper", lambda: vars(self).get("tamper"))

    def _snapshot_getters(self) -> dict[str, Callable[[], Any]]:
        """The identity snapshot beyond torch's and the standard library's: the harness's module globals (the child
        runs as ``__main__``), the timer's, the clock's, the child's, the sender's, the guard's, this role's and the
        counter's state, and every class and function the harness's modules define."""
        modules: dict[str, Any] = {"harness.child": sys.modules["__main__"]}
        modules.update((f"harness.{name}", sys.modules[f"{PACKAGE}.{name}"]) for name in HARNESS_MODULES)
        # The standard library's JSON, which writes every message and reads every command: its functions, classes
        # and module attributes are the harness's to rely on too.
        modules.update((name, sys.modules[name]) for name in JSON_MODULES)
        c = self.c
        watched: dict[str, Any] = {k: m for k, m in modules.items() if k != "harness.timing"}
        watched.update({"timing": c.timing, "clock": c.clock, "child": c, "sender": self.sender, "guard": self.guard,
                        "role": self})
        getters: dict[str, Callable[[], Any]] = {}
        for prefix, obj in watched.items():
            for k in list(vars(obj)):
                getters[f"{prefix}.{k}"] = (lambda obj=obj, k=k: vars(obj).get(k))
        for k in list(vars(self.launch)):
            if k not in LAUNCH_COUNTING:
                getters[f"launch.{k}"] = (lambda k=k: vars(self.launch).get(k))
        getters.update(code_getters(modules))
        getters["state:guard.path_cache_poisoned"] = self.guard.cache_poisoned
        return getters

    # -- flags and failures --------------------------------------------------------------------------------------
    def flag(self, name: str) -> None:
        if name not in self.flags:
            self.flags.append(name)

    def check_tamper(self) -> None:
        changed = self.tamper.changed()
        for name in [n for n in changed if not n.startswith("info:")][:5]:
            self.flag(f"harness_tampered:{name}")
        for name in [n for n in changed if n.startswith("info:")]:
            self.flag(f"global_state_changed:{name[5:]}")

    def context_broken(self) -> bool:
        """A sticky CUDA error: even a device synchronize fails."""
        if not self.is_cuda:
            return False
        try:
            self.sync()
            return False
        except Exception:  # noqa: BLE001
            return True

    def fail(self, index: Any, kind: str) -> None:
        """The answer's call raised: report it (a CUDA error that broke the context is a crash) and end."""
        error = exception_text()
        self.check_tamper()
        self.sender.send({"type": "cuda_error" if self.context_broken() else "runtime_error", "index": index,
                          "kind": kind, "error": error, "flags": self.flags})
        os._exit(0)

    def end(self, message: dict[str, Any]) -> None:
        self.sender.send(message)
        os._exit(0)

    # -- loading -------------------------------------------------------------------------------------------------
    def run(self) -> None:
        """Hello, then (once the trusted side sends it) the answer: imported, built, then its commands."""
        c = self.c
        self.sender.send({"type": "hello", "tf32": c.tf32, "interpret": self.launch.interpret, "pid": os.getpid(),
                          "torch": c.torch.__version__, "triton": c.triton.__version__ if c.triton else None,
                          "setup_s": c.setup_s})
        # Started ahead of its answer: wait for it.
        command = read_command(self.stdin)
        if command.get("cmd") != "load":
            os._exit(0)
        try:
            with open(self.answer_file, "w", encoding="utf-8") as f:
                f.write(command["source"])
            init_inputs = c.area_inputs({"area": "init", "entries": command.get("init_inputs")})
            c.compile_input_builder(command.get("inputs_source"))  # the problem's code: before the answer's
            self.tamper.watch("child.get_fresh_inputs", lambda: vars(c).get("get_fresh_inputs"))
        except Exception:  # noqa: BLE001
            self.end({"type": "setup_error", "error": exception_text()})
        model = self.load(init_inputs)
        try:
            self.serve(model)
        except Exception:  # noqa: BLE001 - the harness choked on something the answer produced
            self.check_tamper()
            self.end({"type": "runtime_error", "index": None, "kind": "harness", "error": exception_text(),
                      "flags": self.flags})
        os._exit(0)

    def load(self, init_inputs: list[Any]) -> Any:
        """Import the answer and build its ``ModelNew``: everything from here on may be hostile."""
        self.sender.send({"type": "loading"})  # the parent: any setup error from now on is the answer's doing
        try:
            module = self.c.load_module(self.answer_file, "kb_answer")
        except Exception:  # noqa: BLE001 - includes SyntaxError
            self.end({"type": "load_error", "error": exception_text(), "flags": self.flags})
        model_cls = getattr(module, "ModelNew", None)
        if model_cls is None:
            self.end({"type": "no_model_new", "error": "the answer module defines no ModelNew", "flags": self.flags})
        self.sender.send({"type": "imported", "flags": self.flags})  # KernelBench's "compiled" from here on
        try:
            model = self.c.build_model(model_cls, init_inputs)
        except Exception:  # noqa: BLE001
            self.check_tamper()
            self.end({"type": "init_error", "error": exception_text(), "flags": self.flags})
        self.check_tamper()
        self.sender.send({"type": "loaded", "flags": self.flags})
        return model

    def serve(self, model: Any) -> None:
        """The trusted side's commands, until ``finish``."""
        while True:
            command = read_command(self.stdin)
            name = command.get("cmd")
            if name == "trial":
                self.trial(model, command)
            elif name == "time":
                self.time(model, command)
            elif name == "probe":
                self.time(self.probe(command), command)
            elif name == "post_timing":
                self.post_timing(model, command)
            elif name == "finish":
                self.finish()

    # -- the commands --------------------------------------------------------------------------------------------
    def trial(self, model: Any, command: dict[str, Any]) -> None:
        """One correctness call on the inputs the trusted side wrote for it."""
        inputs = self.c.area_inputs(command["inputs"])
        self.run_once(model, inputs, self.c.pristine_inputs(command["inputs"], inputs), command.get("index"),
                      command.get("kind", "seeded"), command.get("rng"))

    def time(self, model: Any, command: dict[str, Any]) -> None:
        """One block of the timing (``timing.paired_blocks``): the first loads the timing inputs; every block checks
        them against the snapshot taken then, or, with fresh inputs, against the last call's fresh draw."""
        c, state = self.c, self.timed
        if state.inputs is None:
            state.inputs = c.area_inputs(command["inputs"])
            state.snapshot = c.pristine_inputs(command["inputs"], state.inputs)
        state.next_seed = command.get("seed")
        block = command.get("block")
        protocol = c.protocol if not isinstance(block, dict) else c.timing.TimingProtocol(**dict(
            c.protocol.to_dict(), warmup=int(block["warmup"]), trials=int(block["trials"]),
            discard_first=int(block["discard_first"])))
        per_call: list[int] = []
        pointers = self.input_pointers(state.inputs)

        def after(out: Any, phase: str, ms: float | None = None) -> None:
            per_call.append(self.launch.take())
            self.after_timed_call(out, phase, ms, pointers)

        self.launch.take()
        self.sender.send({"type": "calling", "index": "timing"})
        self.launch.bare = True  # nothing but a counter inside the timing windows
        try:
            raw = c.clock.time_callable(model, state.inputs, protocol, after, self.draw_fresh_inputs)
        except Exception:  # noqa: BLE001
            self.fail("timing", "timing")
        finally:
            self.launch.bare = False
        if self.mutated(state.inputs, state.snapshot):
            self.flag("inputs_mutated")
        self.check_tamper()
        self.sender.send({"type": "timing", "raw": raw.to_dict(), "launches_per_call": per_call, "flags": self.flags})

    def probe(self, command: dict[str, Any]) -> OverheadProbe:
        """The stand-in for a ``probe`` block (timed as ``time`` times a block of the answer's calls)."""
        specs = [(tuple(int(n) for n in shape), torch_dtype(dtype)) for shape, dtype in command["outputs"]]
        return OverheadProbe(self.empty, specs, str(command["structure"]), self.c.device)

    def draw_fresh_inputs(self) -> None:
        """Before a timed call: its inputs drawn afresh from the seed the trusted side sent for it, written into the
        timing input tensors in place (same storage, same addresses), and kept as what the call must leave them.
        No two timed calls see the same values, so no output can be kept for values seen before."""
        state = self.timed
        seed, state.next_seed = state.next_seed, None
        if seed is None or state.inputs is None:
            return
        state.snapshot = []  # the last draw's memory goes back before the next is made
        fresh = self.c.fresh_inputs(int(seed))
        self.refill(state.inputs, fresh)
        state.snapshot = fresh

    def after_timed_call(self, out: Any, phase: str, ms: float | None, pointers: set[int]) -> None:
        """After each call of a timing block. Every timed call is reported as it ends: the trusted side times the
        interval between reports itself (a cross-check of the reported times) and, only now, after the call, says
        whether it checks this call's output, which it then judges before the next call starts. Outputs are scrubbed
        before the next call. The full tamper check (thousands of identity reads, about a millisecond) runs on the
        checked calls and after each block, not after every timed call (a tenth of a second per answer)."""
        structure, outs = self.c.flatten(out)
        if phase == "trial":
            self.sender.send({"type": "timed", "ms": ms})
            reply = read_command(self.stdin)
            if reply.get("cmd") == "check":
                # The outputs leave at once: work the answer left running after its report (a thread, a stream)
                # has only this command's round trip to land. Then the tamper check, on the calls drawn in secret
                # and told only now: no call is safe to tamper in (its flags go with the block's last message).
                self.send_timed_outputs(structure, outs)
                self.check_tamper()
                reply = read_command(self.stdin)  # judged: the next call may start
            self.timed.next_seed = reply.get("seed")
        for o in outs:
            if self.type_of(o) is self.Tensor:
                if o.numel() and self.storage(o).data_ptr() in pointers:
                    self.flag("output_aliases_input")  # scrubbing it would destroy the inputs
                else:
                    self.c.timing.scrub(o)

    def send_timed_outputs(self, structure: str, outs: list[Any]) -> None:
        if any(self.type_of(o) is not self.Tensor for o in outs):
            self.sender.send({"type": "bad_output", "index": "timing", "kind": "timing",
                              "error": "a timed call returned other than plain tensors"})
            return
        metas, written = self.c.write_outputs(outs)
        self.sender.send({"type": "output", "index": "timing", "kind": "timing", "structure": structure,
                          "outputs": metas, "written": written})

    def post_timing(self, model: Any, command: dict[str, Any]) -> None:
        """Overwrite the timed input tensors in place (same storage, same addresses) with fresh inputs, and call
        once more."""
        state = self.timed
        if state.inputs is None:
            raise RuntimeError("post_timing before time")
        state.snapshot = []  # timing is over: the snapshot's memory goes back
        self.refill(state.inputs, self.c.area_inputs(command["inputs"]))
        self.run_once(model, state.inputs, self.c.pristine_inputs(command["inputs"], state.inputs), "post_timing",
                      "post_timing", command.get("rng"))

    def finish(self) -> None:
        self.check_tamper()
        new_threads = [t.name for t in threading.enumerate() if t.ident not in self.threads_before]
        self.sender.send({"type": "done", "flags": self.flags, "guard_flags": list(self.guard.seen),
                          "threads_started": new_threads[:10]})
        sys.stdout.flush()
        os._exit(0)

    # -- one call ------------------------------------------------------------------------------------------------
    def run_once(self, model: Any, inputs: list[Any], snapshot: list[Any], index: Any, kind: str,
                 rng: dict[str, Any] | None) -> None:
        """One call of the answer, checked here (output types, stream order, aliasing, mutated inputs, tampering)
        and its outputs written for the trusted side to judge. It starts from the generators' state the reference's
        forward left (``rng``, relayed by the trusted side as KernelBench's order needs it): the answer never gets a
        seed, secret or not, to replay."""
        c = self.c
        self.launch.take()
        self.sender.send({"type": "calling", "index": index})  # the parent's per-call watchdog starts now
        t0 = self.perf()
        try:
            with c.no_grad():
                if rng is not None:
                    c.set_rng_state(rng)  # where the reference's forward left the generators (KernelBench)
                t0 = self.perf()
                out = model(*inputs)
        except Exception:  # noqa: BLE001
            self.fail(index, kind)
        ms = (self.perf() - t0) * 1e3
        launches = self.launch.take()
        structure, outs = c.flatten(out)
        if self.refuse_other_types(outs, index, kind, launches):
            return
        if self.is_cuda:
            outs_to_send, ms = self.stream_ordered(outs, index, kind, t0)
        else:
            outs_to_send = outs
        pointers = self.input_pointers(inputs)
        if any(o.numel() and self.storage(o).data_ptr() in pointers for o in outs):
            self.flag("output_aliases_input")
        if self.mutated(inputs, snapshot):
            self.flag("inputs_mutated")
        self.check_tamper()
        metas, written = c.write_outputs(outs_to_send)
        self.sender.send({"type": "output", "index": index, "kind": kind, "structure": structure, "outputs": metas,
                          "written": written, "launches": launches, "forward_ms": ms, "flags": self.flags})

    def refuse_other_types(self, outs: list[Any], index: Any, kind: str, launches: int) -> bool:
        """Outputs of another type than exactly ``torch.Tensor`` (a subclass could compute lazily inside whatever
        later inspects it): reported as a bad output. True when there were any."""
        bad_types = [self.type_of(o).__module__ + "." + self.type_of(o).__qualname__ for o in outs
                     if self.type_of(o) is not self.Tensor]
        if not bad_types:
            return False
        subclass = any(self.is_instance(o, self.Tensor) for o in outs)
        self.check_tamper()
        if subclass:
            self.flag("output_not_plain_tensor")
        self.sender.send({"type": "bad_output", "index": index, "kind": kind, "subclass": subclass,
                          "error": f"output types {bad_types}", "launches": launches, "flags": self.flags})
        return True

    def stream_ordered(self, outs: list[Any], index: Any, kind: str, t0: float) -> tuple[list[Any], float]:
        """(what a consumer on the current stream sees, the call's time once the device has finished): the outputs
        copied on the current stream right after the call, compared after a device-wide synchronize."""
        try:
            snap = [self.clone(o) for o in outs]
            self.sync()
        except Exception:  # noqa: BLE001 - asynchronous CUDA errors surface here
            self.fail(index, kind)
        ms = (self.perf() - t0) * 1e3
        if not all(self.equal_bits(a, b) for a, b in zip(snap, outs)):
            self.flag("unsynchronized_stream")
        return snap, ms

    # Comparisons and copies of whole input lists live in functions of their own: a loop variable left in a caller's
    # scope would keep a multi-GB tensor alive (and its device memory taken) until the next command.
    def mutated(self, inputs: list[Any], snapshot: list[Any]) -> bool:
        return any(self.is_instance(x, self.Tensor) and not self.equal_bits(x, s) for x, s in zip(inputs, snapshot))

    def refill(self, inputs: list[Any], fresh: list[Any]) -> None:
        """Overwrite ``inputs`` in place (same storage, same addresses) with ``fresh`` where shapes and dtypes
        allow; elsewhere the fresh value takes the place."""
        c = self.c
        with c.no_grad():
            for i, (t, f) in enumerate(zip(inputs, fresh)):
                if (self.is_instance(t, self.Tensor) and self.is_instance(f, self.Tensor) and t.shape == f.shape
                        and t.dtype == f.dtype):
                    c.copy_(t, f)
                else:
                    inputs[i] = f

    def input_pointers(self, inputs: list[Any]) -> set[int]:
        return {self.storage(x).data_ptr() for x in inputs if self.is_instance(x, self.Tensor) and x.numel()}


def run_answer(child: Any, init: dict[str, Any]) -> None:
    AnswerRole(child, init).run()
