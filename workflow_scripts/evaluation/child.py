"""The evaluation child, and the trust model of the whole evaluation harness.

The parent side (``workflow_scripts.evaluation.sandbox.ChildProcess``, used by ``workflow_scripts.evaluation.answer``
and ``workflow_scripts.evaluation.baseline``) spawns ``python -m workflow_scripts.evaluation.child`` (a fresh
interpreter, never a fork) and this module's ``main`` runs one of two roles: ``answer`` (the untrusted ``ModelNew``;
it never imports the problem module: its inputs come from the trusted side through memory areas) or ``baseline``
(eager / ``torch.compile`` timing of ``Model``). The harness is: ``reference`` (the trusted side of a problem),
``transport`` (the memory areas), ``channel`` (the authenticated result channel, both sides), ``sandbox`` (spawning,
the OS sandbox, environment, resource limits), ``integrity`` (the checks inside the answer's process), ``timing`` and
this module.

Trust model
===========

The answer is untrusted Python running with the child's full privileges. Anything inside the answer's process can
be read or rewritten by it: the harness's variables, the nonce, ``torch`` itself, the bytes the process sends.
So the design never asks the answer's process for a verdict; it asks it only for raw data and makes that data
useless to forge:

* **Reference outputs are computed on the trusted side** (``workflow_scripts.evaluation.reference``, in the
  evaluating process), once per problem, and never leave it. The answer's process receives only the inputs, through
  memory areas (``transport``): the seeded ones sealed (nobody can write them once built, so one answer cannot
  change another's inputs), its secret ones written into its own area only when the trial starts. Nothing of the
  reference exists in the answer's process: reading "the expected output" (``gc.get_objects``, frame walking,
  ``torch.empty`` returning freed memory) finds nothing, and mutating inputs cannot change the reference.
* **The trusted side computes every verdict** (shape, dtype, ``torch.allclose(ref, out, atol, rtol)``, NaN,
  statistics) on its own device, from a copy of the bytes the answer's process wrote into its output area. The
  answer's process can write any bytes it likes; to be judged correct they must equal the reference's on every
  trial, including **hidden trials whose input seed the parent draws at random per answer** (recorded for replay)
  and whose inputs are written only after the answer is loaded, so no output can be precomputed. Timing runs on inputs from another secret seed, and
  after timing those same input tensors are overwritten in place with inputs from a third secret seed and the
  answer must produce their outputs (``post_timing_mismatch``), so caches keyed on tensor identity, address or
  shape are caught. Each timed output is scrubbed (NaN) after the call, outside the timed region, so handing
  back old memory yields NaN.
* **What the answer can still influence** (and what guards it): the timing numbers and the Triton launch count
  it reports are measured inside its process. The harness captures the timer and checker functions before the
  answer is imported and calls only the captured references; the methods of its own objects (guard, launch counter,
  tamper check, sender, this child, the clock) are bound into their instance dicts, so replacing them on a class
  (reachable through ``sys.modules`` without any instance) changes nothing the harness calls. After loading, after
  every call and at the end it checks that torch/time/triton globals, the TF32 flags, its own module globals, every
  class entry and function code (defaults, closure cells) of its modules, its objects' attributes, the launch hooks
  and the process state that hands out frames (signal handlers, timers, the frame-evaluation callback, ``gc``'s
  debug flags) are what they were (``harness_tampered:<name>``); replacing a harness function's code is refused by
  the audit hook. Launches are counted from audit events the wrappers installed into Triton raise and only the audit
  hook receives (while timing, from a list the wrappers hold, read only then); a launch counts only when Triton's own
  launcher made it over a non-empty grid. An answer that reaches the harness's frames through a route the monitor does not see, or writes
  raw memory, could still forge timings or launch counts; it cannot make wrong outputs pass. Speedups above 10x are
  flagged at summary level.
* **Run-time monitors** in the answer's process (a ``sys.addaudithook`` hook, which Python code cannot remove):
  writes outside the child's temporary directory, spawning processes (except Triton's own compiler calls),
  sockets, ``gc`` object enumeration, frame access from answer code (directly, through inspect, or through a standard
  function that hands the frame to its caller: ``traceback.walk_stack``/``walk_tb``, ``logging.currentframe``,
  asyncio's task stacks), ``sys.settrace``/``setprofile``, ``ctypes`` from answer code, signals sent by answer code,
  ``/proc/<other pid>`` access (the path normalised: ``/proc/self/../<pid>`` and symlinks included), code compiled
  under a standard, library or harness file's name (unless it is that file's own text) and a harness function's code
  replaced are blocked and reported to the parent at once, before the answer can interfere. Code of any file that is
  not the standard library's, a library's or the harness's counts as the answer's. They are evidence: a spawn
  through ``_posixsubprocess.fork_exec`` or a write through ``sqlite3`` or ``torch.from_file`` raises no watched
  event, nor do frames a library function hands out or raw memory writes; the OS sandbox bounds what such code can
  reach. Reads are not restricted (nothing secret is on disk; the problem's sources are hidden). Changing
  ``cudnn.benchmark``/``deterministic`` is only reported (``global_state_changed:*``).
  Inputs are compared bitwise after each call with what the trusted side wrote (on the CPU the input area itself,
  mapped read-only here; on the GPU a device copy taken before the call) (``inputs_mutated``); outputs must be
  exactly ``torch.Tensor`` (not a subclass: ``output_not_plain_tensor``), on the right device, not sharing storage with an input
  (``output_aliases_input``); on CUDA the output is snapshotted on the current stream right after the call
  returns and compared with its value after a device-wide synchronize (``unsynchronized_stream``).
* **OS sandbox** (enforced by the kernel; ``sandbox``, docs/evaluation.md "Isolation"): each child is a fresh
  interpreter with a scrubbed environment inside bubblewrap (or, on hosts without it, ``unshare``, a weaker level):
  its own PID namespace (nothing it starts outlives it; no host process, the evaluator included, is visible), user
  namespace (uid 65534 without capabilities under bubblewrap), IPC and UTS namespaces, network namespace (loopback
  only), a read-only file system (repository, interpreter, store) with the problem's sources hidden, a minimal
  ``/dev`` (plus ``/dev/nvidia*`` on CUDA), and a private tmpfs as its working directory (``HOME``, ``TMPDIR``,
  ``TRITON_CACHE_DIR``) with size and inode caps. ``RLIMIT_CORE=0``, ``RLIMIT_NOFILE``, ``RLIMIT_FSIZE``,
  ``RLIMIT_CPU`` (and ``RLIMIT_AS`` on CPU, ``RLIMIT_NPROC`` in a user namespace) are set before torch is imported.
  What was in force is measured by a probe and recorded in every result (``protocol.isolation``,
  ``protocol.hidden_from_answer``); a host that cannot provide it says so (a warning and the record). A timeout
  kills the child's process group, which ends its PID namespace. A child that dies or
  exits early (``os._exit``, ``sys.exit``) never produces the final authenticated ``done`` message, which the
  parent requires, so it is a crash, never a pass; an exception after which even ``torch.cuda.synchronize()``
  fails (a sticky CUDA error) is reported as ``cuda_error`` and is a crash too. Every answer gets a fresh process,
  so no CUDA error outlives it. The memory areas' sizes are sealed: shrinking one under the evaluator's mapping
  (a SIGBUS there) is refused.
* **Result channel**: the parent passes a random nonce on stdin (never argv/env) and a pipe fd; every message
  header carries an HMAC-SHA256 over (sequence number, header) keyed by the nonce. A message with a bad MAC,
  bad framing or inconsistent sizes is treated as forged (``result_channel_forged``). Writes to stdout/stderr
  are logs only, never results.

Limits (documented, not solved): an answer can compute the right function with PyTorch instead of Triton while
also launching a token Triton kernel; ``keeps_torch_op`` (static analysis) reports that. In-process monitors can
be evaded by code that rewrites interpreter state (numpy's ``__array_interface__`` over a raw address reads and
writes any memory without an audit event; they are evidence, not a sandbox; the OS sandbox is what holds), and a
GPU kernel can address any memory of its own process; what such code can corrupt is in-process (launch counts,
timings, input snapshots, flags not yet sent), never the reference or the verdict on outputs. GPU children have no
host-memory cap (docs/evaluation.md, "What is not guaranteed"). Without a sandbox
(``isolation="none"`` or a host where neither bubblewrap nor unshare works, recorded as such) the child runs as the
parent's user in the parent's namespaces and could, in principle, read the parent's memory or write its files.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable

from workflow_scripts.evaluation.channel import Sender
from workflow_scripts.evaluation.integrity import (HARNESS_MODULES, PACKAGE, Guard, LaunchCounter, TamperCheck,
                                                  code_getters, pin_methods)
from workflow_scripts.evaluation.sandbox import apply_rlimits
from workflow_scripts.evaluation.transport import dtype_name


def _fmt_exc(limit: int = 4000) -> str:
    import traceback

    s = traceback.format_exc()
    return s if len(s) <= limit else s[: limit // 4] + "\n...\n" + s[-3 * limit // 4:]


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
        tp = init.get("timing") or {}
        self.cast_integers = bool(init.get("cast_integers"))
        self.protocol = timing.TimingProtocol(**tp) if tp else timing.TimingProtocol.for_device(self.device_kind)
        self.clock: Any = None  # built by start_device
        self.triton = None
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

    def set_seed(self, seed: int) -> None:
        self.manual_seed(seed)
        if self.device_kind == "cuda":
            self.cuda_manual_seed(seed)

    def set_rng_state(self, state: dict[str, Any]) -> None:
        torch = self.torch
        torch.set_rng_state(torch.tensor(list(bytes.fromhex(state["cpu"])), dtype=torch.uint8))
        if self.device_kind == "cuda" and state.get("cuda"):
            torch.cuda.set_rng_state(torch.tensor(list(bytes.fromhex(state["cuda"])), dtype=torch.uint8))

    def process(self, x: Any) -> Any:
        # KernelBench casts every input tensor to fp32; we cast only floating ones (integer targets stay integer)
        # unless the run casts integers too (EvalConfig.integer_inputs="cast"; suite.problem_module.as_input).
        if self._isinstance(x, self.Tensor):
            if x.is_floating_point() or self.cast_integers:
                x = self.to(x, dtype=self.torch.float32)
            return self.to(x, device=self.device)
        return x

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


def _inbox_path(init: dict[str, Any], name: str) -> str:
    """A file the parent put into the working directory: inside a sandbox it is seen through the read-only
    ``in/`` view (``sandbox.INBOX``), since the working directory itself is the child's private tmpfs."""
    return os.path.join(init["workdir"], init.get("inbox", "."), name)


def _read_init() -> dict[str, Any]:
    line = sys.stdin.buffer.readline()
    return json.loads(line)


def _read_cmd(stdin: Any) -> dict[str, Any]:
    line = stdin.readline()
    if not line:
        os._exit(3)  # the parent is gone
    return json.loads(line)


def _run_answer(c: _Child, init: dict[str, Any]) -> None:
    import threading

    c.receive_areas()  # before the monitors: the areas' socket is the harness's own
    torch = c.torch
    sender = c.sender
    launch = LaunchCounter()
    env = os.environ
    guard = Guard(sender, init["workdir"], _inbox_path(init, init["answer"]), allowed_spawn_pkgs=("triton",),
                  generated_dirs=tuple(env[k] for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR") if k in env))
    launch.attach(guard)  # launches are counted from the audit events the guard receives
    # The harness's own objects call their methods through their instance dicts (see integrity.pin_methods).
    pin_methods(c)
    pin_methods(c.clock)
    threads_before = {t.ident for t in threading.enumerate()}
    sys.addaudithook(guard.hook)  # cannot be removed from Python code
    guard.enforcing = True
    # Identity snapshot: taken now, before the answer exists in this process. The harness's module globals (this
    # module runs as __main__), the timer's, the clock's, the child's, the guard's and the counter's state, and
    # every class and function the harness's modules define.
    modules: dict[str, Any] = {"harness.child": sys.modules[__name__]}
    modules.update((f"harness.{name}", sys.modules[f"{PACKAGE}.{name}"]) for name in HARNESS_MODULES)
    watched: dict[str, Any] = {k: m for k, m in modules.items() if k != "harness.timing"}
    watched.update({"timing": c.timing, "clock": c.clock, "child": c, "sender": sender, "guard": guard})
    extra: dict[str, Callable[[], Any]] = {}
    for prefix, obj in watched.items():
        for k in list(vars(obj)):
            if not (obj is sender and k == "_seq"):  # the message count
                extra[f"{prefix}.{k}"] = (lambda obj=obj, k=k: vars(obj).get(k))
    for k in list(vars(launch)):
        if k not in ("count", "_programs", "empty_grid", "_bare"):  # what counting itself changes
            extra[f"launch.{k}"] = (lambda k=k: vars(launch).get(k))
    extra.update(code_getters(modules))
    extra["state:guard.path_cache_poisoned"] = guard.cache_poisoned
    tamper = TamperCheck(torch, extra, launch)
    flags: list[str] = []

    def flag(f: str) -> None:
        if f not in flags:
            flags.append(f)

    def check_tamper() -> None:
        changed = tamper.changed()
        for name in [n for n in changed if not n.startswith("info:")][:5]:
            flag(f"harness_tampered:{name}")
        for name in [n for n in changed if n.startswith("info:")]:
            flag(f"global_state_changed:{name[5:]}")

    sender.send({"type": "hello", "tf32": c.tf32, "interpret": launch.interpret, "pid": os.getpid(),
                 "torch": torch.__version__, "triton": c.triton.__version__ if c.triton else None,
                 "setup_s": c.setup_s})
    # Started ahead of its answer: wait until the answer is in the working directory.
    cmd = _read_cmd(c.stdin)
    if cmd.get("cmd") != "load":
        os._exit(0)
    try:
        init_inputs = c.area_inputs({"area": "init", "entries": cmd.get("init_inputs")})
    except Exception:  # noqa: BLE001
        sender.send({"type": "setup_error", "error": _fmt_exc()})
        os._exit(0)

    # ---- load the answer: everything from here on may be hostile ----
    sender.send({"type": "loading"})  # the parent: any setup error from now on is the answer's doing
    try:
        ans = c.load_module(_inbox_path(init, init["answer"]), "kb_answer")
    except Exception:  # noqa: BLE001 - includes SyntaxError
        sender.send({"type": "load_error", "error": _fmt_exc(), "flags": flags})
        os._exit(0)
    model_cls = getattr(ans, "ModelNew", None)
    if model_cls is None:
        sender.send({"type": "no_model_new", "error": "the answer module defines no ModelNew", "flags": flags})
        os._exit(0)
    sender.send({"type": "imported", "flags": flags})  # KernelBench's "compiled" from here on
    try:
        model = c.build_model(model_cls, init_inputs)
    except Exception:  # noqa: BLE001
        check_tamper()
        sender.send({"type": "init_error", "error": _fmt_exc(), "flags": flags})
        os._exit(0)
    check_tamper()
    sender.send({"type": "loaded", "flags": flags})
    try:
        _answer_loop(c, model, launch, guard, flag, flags, check_tamper, threads_before)
    except Exception:  # noqa: BLE001 - the harness choked on something the answer produced
        check_tamper()
        sender.send({"type": "runtime_error", "index": None, "kind": "harness", "error": _fmt_exc(), "flags": flags})
    os._exit(0)


def _answer_loop(c: _Child, model: Any, launch: LaunchCounter, guard: Guard,
                 flag: Callable[[str], None], flags: list[str], check_tamper: Callable[[], None],
                 threads_before: set[Any]) -> None:
    import threading

    torch = c.torch
    sender = c.sender
    is_cuda = c.device_kind == "cuda"
    sync = torch.cuda.synchronize if is_cuda else None
    clone, equal_bits, storage = c.clone, c.bitwise_equal, c.untyped_storage
    _type, Tensor, _isinstance = c._type, c.Tensor, c._isinstance
    perf = c.clock.perf_counter
    timing_inputs: list[Any] | None = None
    timing_snapshot: list[Any] = []

    def context_broken() -> bool:
        if not is_cuda:
            return False
        try:
            sync()
            return False
        except Exception:  # noqa: BLE001 - a sticky CUDA error
            return True

    def fail(index: Any, kind: str) -> None:
        err = _fmt_exc()
        check_tamper()
        sender.send({"type": "cuda_error" if context_broken() else "runtime_error", "index": index, "kind": kind,
                     "error": err, "flags": flags})
        os._exit(0)

    # Comparisons and copies of whole input lists live in functions of their own: a loop variable left in this loop's
    # scope would keep a multi-GB tensor alive (and its device memory taken) until the next command.
    def mutated(inputs: list[Any], snapshot: list[Any]) -> bool:
        return any(_isinstance(x, Tensor) and not equal_bits(x, s) for x, s in zip(inputs, snapshot))

    def refill(inputs: list[Any], fresh: list[Any]) -> None:
        """Overwrite ``inputs`` in place (same storage, same addresses) with ``fresh`` where shapes and dtypes
        allow; elsewhere the fresh value takes the place."""
        with c.no_grad():
            for i, (t, f) in enumerate(zip(inputs, fresh)):
                if _isinstance(t, Tensor) and _isinstance(f, Tensor) and t.shape == f.shape and t.dtype == f.dtype:
                    c.copy_(t, f)
                else:
                    inputs[i] = f

    def input_ptrs(inputs: list[Any]) -> set[int]:
        return {storage(x).data_ptr() for x in inputs if _isinstance(x, Tensor) and x.numel()}

    def run_once(inputs: list[Any], snapshot: list[Any], seed: int | None, index: Any, kind: str,
                 rng: dict[str, Any] | None) -> None:
        launch.take()
        sender.send({"type": "calling", "index": index})  # the parent's per-call watchdog starts now
        t0 = perf()
        try:
            with c.no_grad():
                if rng is not None:
                    c.set_rng_state(rng)  # where the reference's forward left the generators (KernelBench)
                elif seed is not None:
                    c.set_seed(seed)
                t0 = perf()
                out = model(*inputs)
        except Exception:  # noqa: BLE001
            fail(index, kind)
        ms = (perf() - t0) * 1e3
        launches = launch.take()
        structure, outs = c.flatten(out)
        # Exact type: a subclass could compute lazily inside whatever later inspects it.
        bad_types = [_type(o).__module__ + "." + _type(o).__qualname__ for o in outs if _type(o) is not Tensor]
        if bad_types:
            subclass = any(_isinstance(o, Tensor) for o in outs)
            check_tamper()
            if subclass:
                flag("output_not_plain_tensor")
            sender.send({"type": "bad_output", "index": index, "kind": kind, "subclass": subclass,
                         "error": f"output types {bad_types}", "launches": launches, "flags": flags})
            return
        if is_cuda:
            try:
                snap = [clone(o) for o in outs]  # stream-ordered: what a consumer on the current stream sees
                sync()
            except Exception:  # noqa: BLE001 - asynchronous CUDA errors surface here
                fail(index, kind)
            ms = (perf() - t0) * 1e3
            if not all(equal_bits(a, b) for a, b in zip(snap, outs)):
                flag("unsynchronized_stream")
            send_outs = snap
        else:
            send_outs = outs
        ptrs = input_ptrs(inputs)
        if any(o.numel() and storage(o).data_ptr() in ptrs for o in outs):
            flag("output_aliases_input")
        if mutated(inputs, snapshot):
            flag("inputs_mutated")
        check_tamper()
        metas, written = c.write_outputs(send_outs)
        sender.send({"type": "output", "index": index, "kind": kind, "structure": structure, "outputs": metas,
                     "written": written, "launches": launches, "forward_ms": ms, "flags": flags})

    stdin = c.stdin
    while True:
        cmd = _read_cmd(stdin)
        name = cmd.get("cmd")
        if name == "trial":
            inputs = c.area_inputs(cmd["inputs"])
            run_once(inputs, c.pristine_inputs(cmd["inputs"], inputs), int(cmd["seed"]), cmd.get("index"),
                     cmd.get("kind", "seeded"), cmd.get("rng"))
            del inputs
        elif name == "time":
            # One block of the timing (timing.paired_blocks): the first loads the timing inputs; every block
            # checks them against the snapshot taken then.
            if timing_inputs is None:
                timing_inputs = c.area_inputs(cmd["inputs"])
                timing_snapshot = c.pristine_inputs(cmd["inputs"], timing_inputs)
            block = cmd.get("block")
            protocol = c.protocol if not isinstance(block, dict) else c.timing.TimingProtocol(**dict(
                c.protocol.to_dict(), warmup=int(block["warmup"]), trials=int(block["trials"]),
                discard_first=int(block["discard_first"])))
            per_call: list[int] = []
            ptrs = input_ptrs(timing_inputs)

            def after(out: Any, phase: str, ms: float | None = None) -> None:
                per_call.append(launch.take())
                structure, outs = c.flatten(out)
                if phase == "trial":
                    # Every timed call is reported as it ends: the trusted side times the interval between
                    # reports itself (a cross-check of the reported times) and, only now, after the call, says
                    # whether it checks this call's output, which it then judges before the next call starts.
                    sender.send({"type": "timed", "ms": ms})
                    if _read_cmd(stdin).get("cmd") == "check":
                        check_tamper()  # on the calls drawn in secret, told only now: no call is safe to tamper in
                        if any(_type(o) is not Tensor for o in outs):
                            sender.send({"type": "bad_output", "index": "timing", "kind": "timing",
                                         "error": "a timed call returned other than plain tensors"})
                        else:
                            metas, written = c.write_outputs(outs)
                            sender.send({"type": "output", "index": "timing", "kind": "timing",
                                         "structure": structure, "outputs": metas, "written": written})
                        _read_cmd(stdin)  # judged: the next call may start
                for o in outs:
                    if _type(o) is Tensor:
                        if o.numel() and storage(o).data_ptr() in ptrs:
                            flag("output_aliases_input")  # scrubbing it would destroy the inputs
                        else:
                            c.timing.scrub(o)
                # The full tamper check (thousands of identity reads, about a millisecond) runs on the checked calls
                # and after each block, not after every timed call (a tenth of a second per answer).

            launch.take()
            sender.send({"type": "calling", "index": "timing"})
            launch.bare = True  # nothing but a counter inside the timing windows
            try:
                raw = c.clock.time_callable(model, timing_inputs, protocol, after)
            except Exception:  # noqa: BLE001
                fail("timing", "timing")
            finally:
                launch.bare = False
            if mutated(timing_inputs, timing_snapshot):
                flag("inputs_mutated")
            check_tamper()
            sender.send({"type": "timing", "raw": raw.to_dict(), "launches_per_call": per_call, "flags": flags})
        elif name == "post_timing":
            # Overwrite the timed input tensors in place (same storage, same addresses) with fresh inputs.
            if timing_inputs is None:
                raise RuntimeError("post_timing before time")
            timing_snapshot = []  # timing is over: the snapshot's memory goes back
            fresh = c.area_inputs(cmd["inputs"])
            refill(timing_inputs, fresh)
            del fresh
            run_once(timing_inputs, c.pristine_inputs(cmd["inputs"], timing_inputs), int(cmd["seed"]), "post_timing",
                     "post_timing", cmd.get("rng"))
        elif name == "finish":
            check_tamper()
            new_threads = [t.name for t in threading.enumerate() if t.ident not in threads_before]
            sender.send({"type": "done", "flags": flags, "guard_flags": list(guard.seen),
                         "threads_started": new_threads[:10]})
            sys.stdout.flush()
            os._exit(0)


def _run_baseline(c: _Child, problem: Any, init: dict[str, Any]) -> None:
    torch = c.torch
    sender = c.sender
    c.set_seed(c.seed)
    model = c.build_model(problem.Model, problem.get_init_inputs())
    sender.send({"type": "loaded", "tf32": c.tf32})
    inputs = c.make_inputs(problem, c.seed)  # KernelBench times on the seed-42 inputs
    in_ptrs = {c.untyped_storage(x).data_ptr() for x in inputs if isinstance(x, c.Tensor) and x.numel()}

    def after(out: Any, phase: str, ms: float | None = None) -> None:
        _, outs = c.flatten(out)
        for o in outs:
            if isinstance(o, c.Tensor) and not (o.numel() and c.untyped_storage(o).data_ptr() in in_ptrs):
                c.timing.scrub(o)

    eager_ref = None
    stdin = c.stdin
    while True:
        cmd = _read_cmd(stdin)
        name = cmd.get("cmd")
        if name == "eager":
            try:
                with c.no_grad():
                    _, o = c.flatten(model(*inputs))
                    eager_ref = [x.detach().to("cpu").clone() for x in o if isinstance(x, c.Tensor)]
                raw = c.clock.time_callable(model, inputs, c.protocol, after)
                sender.send({"type": "timing", "raw": raw.to_dict()})
            except Exception:  # noqa: BLE001
                sender.send({"type": "error", "error": _fmt_exc()})
        elif name == "compile":
            try:
                if eager_ref is None:  # reference values for compile_max_abs_diff_vs_eager
                    with c.no_grad():
                        _, o = c.flatten(model(*inputs))
                        eager_ref = [x.detach().to("cpu").clone() for x in o if isinstance(x, c.Tensor)]
                torch._dynamo.reset()
                compiled = torch.compile(model, mode=cmd.get("mode", "max-autotune"), backend="inductor")
                t0 = time.perf_counter()
                with c.no_grad():
                    first = compiled(*inputs)
                    if c.device_kind == "cuda":
                        torch.cuda.synchronize()
                compile_s = time.perf_counter() - t0
                diff = None
                _, fo = c.flatten(first)
                if eager_ref is not None:
                    try:
                        diff = max(float((a.double() - b.detach().to("cpu").double()).abs().max()) if a.numel() else 0.0
                                   for a, b in zip(eager_ref, fo))
                    except Exception:  # noqa: BLE001
                        diff = None
                del first, fo
                raw = c.clock.time_callable(compiled, inputs, c.protocol, after)
                sender.send({"type": "timing", "raw": raw.to_dict(), "compile_time_s": compile_s,
                             "max_abs_diff_vs_eager": diff})
            except Exception:  # noqa: BLE001
                sender.send({"type": "error", "error": _fmt_exc()})
        elif name == "finish":
            sender.send({"type": "done"})
            sys.stdout.flush()
            os._exit(0)


def main() -> None:
    init = _read_init()
    apply_rlimits(init.get("limits") or {}, bool(init.get("user_namespace")))
    # Our package is on PYTHONPATH; the working directory (the answer's folder) must not shadow modules.
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    sender = Sender(int(init["fd"]), bytes.fromhex(init["nonce"]))
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
            if _read_cmd(c.stdin).get("cmd") != "go":
                os._exit(0)
            c.setup_s["gate_wait_s"] = time.monotonic() - t_gate
        t_device = time.monotonic()
        c.start_device()
        c.setup_s["device_start_s"] = time.monotonic() - t_device
        c.setup_s["startup_s"] = c.setup_s["host_start_s"] + c.setup_s["device_start_s"]
        if init.get("start_gate"):
            sender.send({"type": "device_ready"})
    except Exception:  # noqa: BLE001
        sender.send({"type": "setup_error", "error": _fmt_exc()})
        os._exit(0)
    try:
        if c.role == "answer":
            _run_answer(c, init)  # never imports the problem: its inputs come from the trusted side
        elif c.role == "baseline":
            try:
                problem = c.load_module(_inbox_path(init, init["problem"]), "kb_problem")
            except Exception:  # noqa: BLE001
                sender.send({"type": "setup_error", "error": "loading the problem failed:\n" + _fmt_exc()})
                os._exit(0)
            _run_baseline(c, problem, init)
        else:
            raise ValueError(f"unknown role {c.role!r}")
    except Exception:  # noqa: BLE001 - harness-side failures
        sender.send({"type": "setup_error", "error": _fmt_exc()})
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
