"""The tamper check of the answer's process (trust model in ``workflow_scripts.evaluation``): an identity snapshot,
taken before the answer is imported, of the functions, classes and flags the harness relies on (torch's, time's,
os's, the harness's own classes, functions and code objects) and of the process state that hands out frames
without an audit event (signal handlers, interval timers, the frame-evaluation hook, ``gc``'s debug flags).
``TamperCheck.changed`` lists what differs now; the child reports each as ``harness_tampered:<name>``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
from typing import Any, Callable

from workflow_scripts.evaluation.integrity import HARNESS_MODULES, PACKAGE, LaunchCounter, pin_methods


# What importing torch._dynamo (any torch.compile) replaces by a wrapper of the original (torch/_dynamo/__init__.py).
_DYNAMO_WRAPPED = frozenset({"torch.manual_seed"})


class TamperCheck:
    """Identity snapshot of the functions, classes and flags the harness relies on (taken before the answer is
    imported); ``changed()`` lists what differs now."""

    def __init__(self, torch: Any, extra: dict[str, Callable[[], Any]], launch: LaunchCounter | None) -> None:
        import builtins
        import time as time_mod

        g: dict[str, Callable[[], Any]] = {}
        T = torch.Tensor
        for n in ("allclose", "isclose", "equal", "manual_seed", "rand", "randn", "randint", "empty", "empty_like",
                  "zeros", "ones", "no_grad", "is_grad_enabled", "set_grad_enabled", "get_float32_matmul_precision",
                  "set_float32_matmul_precision", "Tensor", "isnan", "frombuffer", "get_default_dtype", "device"):
            g[f"torch.{n}"] = (lambda n=n: getattr(torch, n, None))
        for n in ("clone", "copy_", "cpu", "to", "fill_", "detach", "contiguous", "view", "reshape", "data_ptr",
                  "untyped_storage", "numpy", "__eq__", "__ne__", "equal", "zero_", "numel", "element_size",
                  "__torch_function__", "size", "stride", "dtype", "device", "is_floating_point", "storage_offset"):
            g[f"torch.Tensor.{n}"] = (lambda n=n: T.__dict__.get(n, getattr(T, n, None)))
        for n in ("__call__", "_call_impl", "to", "_apply"):
            g[f"torch.nn.Module.{n}"] = (lambda n=n: getattr(torch.nn.Module, n, None))
        for n in ("synchronize", "Event", "Stream", "current_stream", "manual_seed", "manual_seed_all",
                  "is_available", "set_device", "stream", "default_stream"):
            g[f"torch.cuda.{n}"] = (lambda n=n: getattr(torch.cuda, n, None))
        for n in ("record", "elapsed_time", "synchronize", "query", "wait"):
            g[f"torch.cuda.Event.{n}"] = (lambda n=n: getattr(torch.cuda.Event, n, None))
        for n in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "sleep"):
            g[f"time.{n}"] = (lambda n=n: getattr(time_mod, n, None))
        for n in ("write", "read", "getpid", "_exit"):
            g[f"os.{n}"] = (lambda n=n: getattr(os, n, None))
        for n in ("type", "isinstance", "len", "getattr", "setattr", "id", "__import__", "open", "hasattr"):
            g[f"builtins.{n}"] = (lambda n=n: getattr(builtins, n, None))
        for m in ("torch", "time", "os", "sys", "builtins", "json", "json.encoder", "json.decoder", "triton",
                  *(f"{PACKAGE}.{name}" for name in HARNESS_MODULES)):
            g[f"sys.modules[{m}]"] = (lambda m=m: sys.modules.get(m))
        g["select.select"] = lambda: select.select
        g["json.dumps"] = lambda: json.dumps
        # Values, not identities.
        g["tf32:cuda_matmul_allow_tf32"] = lambda: bool(torch.backends.cuda.matmul.allow_tf32)
        g["tf32:cudnn_allow_tf32"] = lambda: bool(torch.backends.cudnn.allow_tf32)
        g["tf32:float32_matmul_precision"] = lambda: _call_str(torch.get_float32_matmul_precision)
        g["default_dtype"] = lambda: str(torch.get_default_dtype())
        # Informational only (reported as global_state_changed:<name>): they tune the answer's own PyTorch calls.
        g["info:cudnn.benchmark"] = lambda: bool(torch.backends.cudnn.benchmark)
        g["info:cudnn.deterministic"] = lambda: bool(torch.backends.cudnn.deterministic)
        g.update(frame_source_getters(torch))
        g.update(extra)
        self.getters = g
        self.expected = {k: f() for k, f in g.items()}
        self._value_keys = {k for k in g if k.startswith(("tf32:", "info:", "default_dtype", "state:"))}
        self.launch = launch
        pin_methods(self)

    def watch(self, key: str, getter: Callable[[], Any]) -> None:
        """One more identity, from now on: for an object made after the snapshot (the check itself, held by its
        owner)."""
        self.getters[key] = getter
        self.expected[key] = getter()

    def changed(self) -> list[str]:
        bad = []
        for k, f in self.getters.items():
            try:
                v = f()
            except Exception:  # noqa: BLE001 - a getter that now raises means something was replaced
                bad.append(k)
                continue
            exp = self.expected[k]
            if k in _DYNAMO_WRAPPED and getattr(v, "__wrapped__", None) is exp:
                continue  # importing torch._dynamo (torch.compile) wraps it: not the answer's doing
            if (v != exp) if k in self._value_keys else (v is not exp):
                bad.append(k)
        if self.launch is not None and not self.launch.intact():
            bad.append("triton_launch_hook")
        return bad


def _call_str(f: Callable[[], Any]) -> str:
    try:
        return str(f())
    except Exception:  # noqa: BLE001
        return "<error>"


def frame_source_getters(torch: Any) -> dict[str, Callable[[], Any]]:
    """Process state through which frames are handed out without any audit event: a signal handler is called with
    the interrupted frame (the harness's, often), an interval timer delivers such signals, a frame-evaluation hook
    (PEP 523, what ``torch.compile`` installs around its calls) receives every frame that runs, and
    ``gc.DEBUG_SAVEALL`` keeps what the collector frees. Values: any change is reported."""
    import gc

    g: dict[str, Callable[[], Any]] = {}
    for sig in sorted(signal.valid_signals()):
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(int(sig))
        g[f"state:signal.{name}"] = (lambda sig=sig: _handler_id(signal.getsignal(sig)))
    for which in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
        timer = getattr(signal, which)
        g[f"state:signal.setitimer({which})"] = (lambda timer=timer: signal.getitimer(timer) != (0.0, 0.0))
    g["state:gc.debug"] = gc.get_debug
    # A torch function or dispatch mode left active intercepts every torch call the harness makes after the
    # answer's own (copying its outputs out, comparing its inputs, scrubbing): work deferred until the harness
    # touches an output, a faked torch.equal.
    if hasattr(torch._C, "_len_torch_function_stack"):
        g["state:torch_function_modes"] = _function_modes(torch)
    if hasattr(torch._C, "_len_torch_dispatch_stack"):
        g["state:torch_dispatch_modes"] = torch._C._len_torch_dispatch_stack  # captured now, as every getter
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
    except ImportError:
        pass
    else:
        g["state:eval_frame_callback"] = lambda: _handler_id(get_eval_frame_callback())
    return g


def _function_modes(torch: Any) -> Callable[[], int]:
    """A getter of the torch function modes active, but torch's own default-device mode (``torch.set_default_device``
    keeps one on the stack; a global setting, which static analysis labels): exactly that type, not a subclass of it.
    The C functions it calls are taken now, before the answer exists."""
    from torch.utils._device import DeviceContext

    length, mode_at = torch._C._len_torch_function_stack, torch._C._get_function_stack_at
    return lambda: sum(1 for i in range(length()) if type(mode_at(i)) is not DeviceContext)


def _handler_id(h: Any) -> Any:
    # Handlers compared by identity, but as values (SIG_DFL and friends are ints; functions by id).
    return h if h is None or isinstance(h, (int, bool)) else ("object", id(h))


def code_getters(modules: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """Identity getters for the harness's own classes and functions (``modules``: prefix -> module): every entry of
    every class the modules define, and every function's ``__code__``, ``__defaults__``, ``__kwdefaults__`` and
    closure cells. Classes are reachable through ``sys.modules`` without any instance, and replacing one of their
    methods raises no audit event (replacing a function's code does: the Guard refuses it)."""
    g: dict[str, Callable[[], Any]] = {}

    def function(key: str, fn: Any) -> None:
        fn = getattr(fn, "__func__", fn)
        if not hasattr(fn, "__code__"):
            return
        for attr in ("__code__", "__defaults__", "__kwdefaults__"):
            g[f"{key}.{attr}"] = (lambda fn=fn, attr=attr: getattr(fn, attr, None))
        for i, cell in enumerate(fn.__closure__ or ()):
            g[f"{key}.<cell {i}>"] = (lambda cell=cell: _cell(cell))

    for prefix, mod in modules.items():
        for name, obj in list(vars(mod).items()):
            if getattr(obj, "__module__", None) != mod.__name__:
                continue  # imported, not defined here
            if isinstance(obj, type):
                for k, v in list(vars(obj).items()):
                    if k in ("__dict__", "__weakref__", "__doc__"):
                        continue
                    g[f"{prefix}.{name}.{k}"] = (lambda obj=obj, k=k: obj.__dict__.get(k))
                    for suffix, part in (("", v), (".fget", getattr(v, "fget", None)),
                                         (".fset", getattr(v, "fset", None))):
                        if part is not None and not isinstance(part, type):
                            function(f"{prefix}.{name}.{k}{suffix}", part)
            elif callable(obj):
                function(f"{prefix}.{name}", obj)
    return g


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None
