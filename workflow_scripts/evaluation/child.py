"""The evaluation child: ``python -m workflow_scripts.evaluation.child``, a fresh interpreter (never a fork) that the
trusted side starts through ``sandbox.ChildProcess`` (trust model in ``workflow_scripts.evaluation``). ``main``
applies the resource limits, reads its start record, gets torch, Triton and (when the start gate says so) the device
ready, and runs one of two roles: ``answer`` (the untrusted ``ModelNew``: ``child_answer``) or ``baseline`` (eager and
``torch.compile`` timing of the problem's own ``Model``, here).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from workflow_scripts.evaluation.channel import Sender, exception_text, read_command
from workflow_scripts.evaluation.child_answer import run_answer
from workflow_scripts.evaluation.limits import apply_rlimits
from workflow_scripts.evaluation.transport import dtype_name


class _Child:
    """Everything the child needs, set up before any answer code runs: the host part here (interpreter, torch,
    Triton and its driver's C helpers, in parallel with other children), the device part in ``start_device`` (a
    started answer's process waits for the trusted side's ``go`` in between: ``start_gate``)."""

    def __init__(self, init: dict[str, Any], sender: Sender) -> None:
        import builtins

        self.init = init
        self.sender = sender
        self.role = init["role"]
        self.device_kind = init["device"]
        self.seed = int(init.get("seed", 42))
        self._type = builtins.type
        self._isinstance = builtins.isinstance
        import torch

        self.torch = torch
        self.Tensor = torch.Tensor
        self.manual_seed = torch.manual_seed
        self.cuda_manual_seed = torch.cuda.manual_seed
        self.no_grad = torch.no_grad
        self.clone = torch.Tensor.clone
        self.to = torch.Tensor.to
        self.contiguous = torch.Tensor.contiguous
        self.view = torch.Tensor.view
        self.reshape = torch.Tensor.reshape
        self.equal = torch.equal
        self.untyped_storage = torch.Tensor.untyped_storage
        self.copy_ = torch.Tensor.copy_
        self.device = torch.device("cuda", 0) if self.device_kind == "cuda" else torch.device("cpu")
        from workflow_scripts.evaluation import environment, transport

        self.tf32 = environment.configure_tf32(init.get("tf32", "pytorch_default"))  # flags only: no CUDA call
        self.transport = transport
        # The memory areas (answer role): inputs in, outputs out (transport); they arrive later (receive_areas).
        self.areas: dict[str, Any] = {}
        self.setup_s: dict[str, float] = {}  # what getting ready took, reported in the hello
        from workflow_scripts.evaluation import timing
        self.timing = timing
        self.cast_integers = bool(init.get("cast_integers"))
        self.protocol = timing.TimingProtocol(**init["timing"])  # the trusted side sends its protocol
        self.clock: Any = None  # built by start_device
        self.triton = None
        self.get_fresh_inputs: Any = None  # compile_input_builder
        self.stdin = sys.stdin.buffer  # captured before any answer code runs
        if self.role == "answer":
            import triton
            import triton.language  # noqa: F401 - import before the answer so its cost is not the answer's

            self.triton = triton
            if self.device_kind == "cuda":
                # Triton's driver helpers are a small C module, compiled by gcc unless Triton's cache has them:
                # host work, done here (no CUDA call yet), not inside the answer's first launch.
                try:
                    from triton.backends.nvidia.driver import CudaUtils

                    CudaUtils()
                except Exception:  # noqa: BLE001 - built in start_device then, or by the answer's own launch
                    pass

    def start_device(self) -> None:
        """The device part of the setup: the CUDA context, the L2 flush buffer, Triton's driver bound to the device (an
        answer's process only once the start gate says so: one process at a time, never during a timing)."""
        torch = self.torch
        if self.device_kind == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("CUDA requested but torch.cuda.is_available() is False in the child")
            torch.cuda.init()
            torch.cuda.set_device(0)
        self.clock = self.timing.Clock(self.device_kind, self.protocol.l2_flush_mib)
        if self.triton is not None and self.device_kind == "cuda":
            try:
                self.triton.runtime.driver.active.get_current_device()
                self.triton.runtime.driver.active.utils  # noqa: B018
            except Exception:  # noqa: BLE001 - the answer's own launch will report it
                pass

    def receive_areas(self) -> None:
        """The memory areas, handed over once the trusted side built them (``sandbox.ChildProcess.deliver_areas``):
        this process was started before that, so its interpreter, torch, CUDA context and Triton got ready while the
        trusted side prepared the problem. Page-locked here, before the answer arrives."""
        import socket

        fd = self.init.get("area_socket")
        if fd is None:
            return
        t0 = time.monotonic()
        sock = socket.socket(fileno=int(fd))
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 256)
        sock.close()
        if not data:
            os._exit(3)  # the parent is gone
        specs = json.loads(data)
        t1 = time.monotonic()
        self.areas = self.transport.open_areas({name: dict(s, fd=fds[int(s["fd"])]) for name, s in specs.items()})
        if self.device_kind == "cuda":
            for area in self.areas.values():
                area.pin()
        self.setup_s.update(areas_wait_s=t1 - t0, areas_pin_s=time.monotonic() - t1)

    # -- problem loading -------------------------------------------------------------------------------------
    def load_module(self, path: str, name: str) -> Any:
        import importlib.util

        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # Triton and dataclasses look modules up by name
        spec.loader.exec_module(mod)
        return mod

    def inbox_path(self, name: str) -> str:
        """A file the parent put into the working directory: inside a sandbox it is seen through the read-only
        ``in/`` view (``sandbox.INBOX``), since the working directory itself is the child's private tmpfs."""
        return os.path.join(self.init["workdir"], self.init.get("inbox", "."), name)

    def set_seed(self, seed: int) -> None:
        self.manual_seed(seed)
        if self.device_kind == "cuda":
            self.cuda_manual_seed(seed)

    def set_rng_state(self, state: dict[str, Any]) -> None:
        # The states are host byte tensors whatever default device the answer set (torch.set_default_device("cuda")
        # at import would put them on the GPU, which the generators refuse: seen on the H200).
        torch = self.torch
        torch.set_rng_state(torch.tensor(list(bytes.fromhex(state["cpu"])), dtype=torch.uint8, device="cpu"))
        if self.device_kind == "cuda" and state.get("cuda"):
            torch.cuda.set_rng_state(torch.tensor(list(bytes.fromhex(state["cuda"])), dtype=torch.uint8,
                                                  device="cpu"))

    def process(self, x: Any) -> Any:
        # KernelBench casts every input tensor to fp32; we cast only floating ones (integer targets stay integer)
        # unless the run casts integers too (EvalConfig.integer_inputs="cast"; suite.problem_module.as_input).
        if self._isinstance(x, self.Tensor):
            if x.is_floating_point() or self.cast_integers:
                x = self.to(x, dtype=self.torch.float32)
            return self.to(x, device=self.device)
        return x

    def compile_input_builder(self, source: str | None) -> None:
        """The problem's input builder (``suite.problem_module.input_builder_source``: its ``get_inputs`` without any
        class), sent by the trusted side with the answer and compiled before the answer is imported. None: the timed
        calls keep the timing inputs' values."""
        from workflow_scripts.suite.problem_module import input_builder

        self.get_fresh_inputs = input_builder(source) if source else None

    def fresh_inputs(self, seed: int) -> list[Any]:
        """Inputs drawn as the trusted side draws a secret trial's (``ReferenceSide.secret_inputs``: the seed, then
        ``get_inputs()`` on the device), so that it can draw the same ones to check a timed call's output. The device
        is named, whatever default the answer set (``torch.set_default_device``)."""
        self.set_seed(seed)
        with self.torch.device(self.device):
            return [self.process(x) for x in self.get_fresh_inputs()]

    def make_inputs(self, problem: Any, seed: int) -> list[Any]:
        """The problem's inputs under ``seed``, on the CPU as KernelBench builds them (baseline role)."""
        self.set_seed(seed)
        return [self.process(x) for x in problem.get_inputs()]

    def area_inputs(self, spec: Any) -> list[Any]:
        """Inputs the trusted side wrote into one of the areas: ``{"area": name, "entries": [...]}``, copied onto
        the device (answer role: it never sees the problem module)."""
        area = self.areas[str(spec["area"])]
        return area.read(spec["entries"], self.device)

    def pristine_inputs(self, spec: Any, inputs: list[Any]) -> list[Any]:
        """What ``inputs`` (read from ``spec``) must still equal after the answer's call (``inputs_mutated``): on
        the CPU the area's own bytes, mapped read-only in this process (no copy: a multi-GB input is not cloned
        for every call); on the GPU a device copy (comparing against host memory would cost a transfer)."""
        if self.device_kind != "cuda":
            return self.areas[str(spec["area"])].views(spec["entries"])
        return [self.clone(x) if self._isinstance(x, self.Tensor) else x for x in inputs]

    def build_model(self, cls: Any, init_inputs: list[Any]) -> Any:
        """KernelBench's construction: seed, ``Model(*get_init_inputs())`` under the seed again, moved with
        ``.to(device, float32)``. ``init_inputs`` were drawn after seeding (by the trusted side for answers)."""
        init_inputs = [self.process(x) for x in init_inputs]
        with self.no_grad():
            self.set_seed(self.seed)
            model = cls(*init_inputs)
            model = model.to(device=self.device, dtype=self.torch.float32)
        return model

    # -- outputs -------------------------------------------------------------------------------------------------
    def flatten(self, out: Any) -> tuple[str, list[Any]]:
        if self._isinstance(out, (tuple, list)) and self._type(out) in (tuple, list):
            return "sequence", list(out)
        return "tensor", [out]

    def bitwise_equal(self, a: Any, b: Any) -> bool:
        torch = self.torch
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.numel() == 0:
            return True
        ac = self.reshape(self.contiguous(a), (-1,))
        bc = self.reshape(self.contiguous(b), (-1,))
        if a.dtype == torch.bool:
            return bool(self.equal(ac, bc))
        ac, bc = self.view(ac, torch.uint8), self.view(bc, torch.uint8)
        # As the widest integers the layout allows: a byte-wise comparison is about eight times slower on the CPU.
        for wide in (torch.int64, torch.int32, torch.int16):
            try:
                aw, bw = self.view(ac, wide), self.view(bc, wide)
            except RuntimeError:  # a byte count or offset that is not a multiple of its size (and only that:
                continue  # the comparison itself, e.g. out of device memory, is outside this try)
            return bool(self.equal(aw, bw))
        return bool(self.equal(ac, bc))

    def write_outputs(self, tensors: list[Any]) -> tuple[list[dict[str, Any]], bool]:
        """Outputs into the output area for the trusted side to judge: (slots with each output's device, fits).
        Outputs larger than the area (which holds the reference's outputs) are described but not written: their
        shapes already differ from the reference's."""
        area = self.areas["output"]
        described = [{"shape": list(t.shape), "dtype": dtype_name(t.dtype), "device": str(t.device)} for t in tensors]
        try:
            entries = area.write(tensors)
        except Exception:  # noqa: BLE001 - too large, or a dtype the transport does not carry
            return described, False
        return [dict(e["tensor"], device=d["device"]) for e, d in zip(entries, described)], True


def _read_init() -> dict[str, Any]:
    line = sys.stdin.buffer.readline()
    return json.loads(line)


def _run_baseline(c: _Child, problem: Any, init: dict[str, Any]) -> None:
    """The baseline role: the problem's ``Model`` on KernelBench's seed-42 inputs, both built before ``loaded`` (the
    parent takes its GPU alone only for what is measured: ``baseline_windows``). Commands: ``eager`` (time the
    model), ``compile`` (``torch.compile`` and its first call; replies ``compiled``), ``time`` (time the compiled
    module), ``finish``."""
    sender = c.sender
    c.set_seed(c.seed)
    model = c.build_model(problem.Model, problem.get_init_inputs())
    inputs = c.make_inputs(problem, c.seed)  # KernelBench times on the seed-42 inputs
    sender.send({"type": "loaded", "tf32": c.tf32})
    in_ptrs = {c.untyped_storage(x).data_ptr() for x in inputs if isinstance(x, c.Tensor) and x.numel()}

    def after(out: Any, phase: str, ms: float | None = None) -> None:
        _, outs = c.flatten(out)
        for o in outs:
            if isinstance(o, c.Tensor) and not (o.numel() and c.untyped_storage(o).data_ptr() in in_ptrs):
                c.timing.scrub(o)

    def eager_outputs() -> list[Any]:
        """Eager's outputs on the host: what the compiled module's first output is compared with."""
        with c.no_grad():
            _, o = c.flatten(model(*inputs))
            return [x.detach().to("cpu").clone() for x in o if isinstance(x, c.Tensor)]

    compiled: Any = None
    while True:
        cmd = read_command(c.stdin)
        name = cmd.get("cmd")
        try:
            if name == "eager":  # its own child: no compiled module to compare, nothing but the timing here
                raw = c.clock.time_callable(model, inputs, c.protocol, after)
                sender.send({"type": "timing", "raw": raw.to_dict()})
            elif name == "compile":
                eager_ref = eager_outputs()
                compiled, reply = _compile(c, model, inputs, eager_ref, cmd.get("mode", "max-autotune"),
                                           bool(init.get("exclusive_windows")))
                sender.send(reply)
            elif name == "time":
                if compiled is None:
                    raise RuntimeError("'time' before a successful 'compile'")
                raw = c.clock.time_callable(compiled, inputs, c.protocol, after)
                sender.send({"type": "timing", "raw": raw.to_dict()})
            elif name == "finish":
                sender.send({"type": "done"})
                sys.stdout.flush()
                os._exit(0)
        except Exception:  # noqa: BLE001
            sender.send({"type": "error", "error": exception_text()})


def _compile(c: _Child, model: Any, inputs: list[Any], eager_ref: list[Any], mode: str, windows: bool
             ) -> tuple[Any, dict[str, Any]]:
    """``torch.compile`` after ``torch._dynamo.reset()``, and its first call (tracing, Inductor's code generation,
    autotuning) timed: its span and its waits for exclusive windows, in the reply. With ``windows`` (a GPU
    lease) Inductor's GPU benchmarks run in exclusive windows (``baseline_windows``), or the whole first call does
    where they cannot be reached (the reply's ``autotune_exclusive`` says which)."""
    from workflow_scripts.evaluation import baseline_windows

    torch = c.torch
    requests = baseline_windows.WindowRequests(c.sender.send, lambda: read_command(c.stdin))
    gated = baseline_windows.gate_inductor_benchmarks(requests.ask, requests.done) if windows else None
    whole = gated == baseline_windows.WHOLE_FIRST_CALL
    torch._dynamo.reset()
    compiled = torch.compile(model, mode=mode, backend="inductor")
    start = time.time()
    if whole:
        requests.ask(whole_first_call=True)
    try:
        with c.no_grad():
            first = compiled(*inputs)
            if c.device_kind == "cuda":
                torch.cuda.synchronize()
    finally:
        if whole:
            requests.done()
    span = (start, time.time())
    _, outputs = c.flatten(first)
    try:
        diff = max((float((a.double() - b.detach().to("cpu").double()).abs().max()) if a.numel() else 0.0
                    for a, b in zip(eager_ref, outputs)), default=None)
    except Exception:  # noqa: BLE001 - outputs that do not compare: no distance recorded
        diff = None
    # The parent makes the compile time of the span, less the waits and the stops (baseline.compile_seconds).
    return compiled, {"type": "compiled", "max_abs_diff_vs_eager": diff, "autotune_exclusive": gated,
                      "windows_granted": requests.granted, "compile_span": span, "wait_spans": requests.wait_spans}


def main() -> None:
    init = _read_init()
    apply_rlimits(init.get("limits") or {}, bool(init.get("user_namespace")))
    # Our package is on PYTHONPATH; the working directory (the answer's folder) must not shadow modules.
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    sender = Sender(int(init["fd"]))
    import faulthandler

    faulthandler.enable()
    t0 = time.monotonic()
    try:
        c = _Child(init, sender)
        c.setup_s["host_start_s"] = time.monotonic() - t0
        if init.get("start_gate"):
            # Ready but for the device: the trusted side says when the CUDA context may be created (never while an
            # answer is timed; one process at a time, see start_gate).
            sender.send({"type": "staged"})
            t_gate = time.monotonic()
            if read_command(c.stdin).get("cmd") != "go":
                os._exit(0)
            c.setup_s["gate_wait_s"] = time.monotonic() - t_gate
        t_device = time.monotonic()
        c.start_device()
        c.setup_s["device_start_s"] = time.monotonic() - t_device
        c.setup_s["startup_s"] = c.setup_s["host_start_s"] + c.setup_s["device_start_s"]
        if init.get("start_gate"):
            sender.send({"type": "device_ready"})
    except Exception:  # noqa: BLE001
        sender.send({"type": "setup_error", "error": exception_text()})
        os._exit(0)
    try:
        if c.role == "answer":
            run_answer(c, init)  # never imports the problem: its inputs come from the trusted side
        elif c.role == "baseline":
            try:
                problem = c.load_module(c.inbox_path(init["problem"]), "kb_problem")
            except Exception:  # noqa: BLE001
                sender.send({"type": "setup_error", "error": "loading the problem failed:\n" + exception_text()})
                os._exit(0)
            _run_baseline(c, problem, init)
        else:
            raise ValueError(f"unknown role {c.role!r}")
    except Exception:  # noqa: BLE001 - harness-side failures
        sender.send({"type": "setup_error", "error": exception_text()})
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
