"""In-child integrity checks of the answer's process (trust model in ``workflow_scripts.evaluation.child``).

All three are set up by the child before the answer is imported:

* ``Guard``: the ``sys.addaudithook`` monitor (writes outside the work dir, processes, sockets, ``gc``, frames,
  tracing, ``ctypes``, signals, ``/proc``); it blocks by raising and reports each violation at once;
* ``LaunchCounter``: counts Triton launches made by Triton's own launcher code;
* ``TamperCheck``: an identity snapshot of the functions, classes and flags the harness relies on.
"""

from __future__ import annotations

import hmac
import json
import os
import select
import sys
from typing import Any, Callable

from workflow_scripts.evaluation.channel import Sender

PACKAGE = "workflow_scripts.evaluation"
# The child side's modules besides ``child`` itself (which runs as ``__main__``): their globals and their
# ``sys.modules`` entries are part of the tamper check.
HARNESS_MODULES = ("channel", "integrity", "sandbox", "timing")
# Their files: a frame in one of them is the harness's own, never the answer's.
HARNESS_FILES = ("child.py",) + tuple(f"{name}.py" for name in HARNESS_MODULES)


class Guard:
    """The audit-hook monitor of the answer's process (trust model: ``workflow_scripts.evaluation.child``). Blocks
    by raising PermissionError; reports every violation to the parent immediately."""

    _WRITE_PATH_EVENTS = {"os.remove": 0, "os.rmdir": 0, "os.rename": (0, 1), "os.mkdir": 0, "os.chmod": 0,
                          "os.chown": 0, "os.link": (0, 1), "os.symlink": 1, "os.truncate": 0, "os.utime": 0,
                          "shutil.rmtree": 0, "shutil.copyfile": 1, "shutil.copytree": 1, "shutil.move": 1}
    _SPAWN_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                     "os.forkpty", "pty.spawn", "os.startfile"}
    _GC_EVENTS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
    _NET_EVENTS = {"socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
                   "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg", "socket.getnameinfo",
                   "urllib.Request", "http.client.connect"}
    _CTYPES_EVENTS = {"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.string_at",
                      "ctypes.wstring_at", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.call_function",
                      "ctypes.addressof", "ctypes.create_string_buffer", "ctypes.create_unicode_buffer",
                      "ctypes.get_errno", "ctypes.set_errno", "ctypes.PyObj_FromPtr", "ctypes.memmove",
                      "ctypes.memset"}

    def __init__(self, sender: Sender, workdir: str, answer_file: str, allowed_spawn_pkgs: tuple[str, ...]) -> None:
        import sysconfig

        self.sender = sender
        self.roots = [os.path.realpath(workdir)]
        self.answer_file = os.path.realpath(answer_file)
        self.enforcing = False
        self.busy = False
        self.seen: list[str] = []
        self.pid = os.getpid()
        self.allowed_spawn_pkgs = allowed_spawn_pkgs
        self._getframe = sys._getframe
        self._rp_cache: dict[str, str] = {}
        base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
        self.site_dirs = tuple({os.path.realpath(p) + os.sep for p in
                                (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])})
        self.stdlib_dirs = tuple({os.path.realpath(p) + os.sep for p in (base["stdlib"], base["platstdlib"])})
        here = os.path.dirname(__file__)
        self.harness_files = {os.path.realpath(os.path.join(here, f)) for f in HARNESS_FILES}
        self.inspect_files = {os.path.realpath(os.path.join(base["stdlib"], "inspect.py"))}
        self.watched = frozenset(set(self._WRITE_PATH_EVENTS) | self._SPAWN_EVENTS | self._GC_EVENTS
                                 | self._NET_EVENTS | self._CTYPES_EVENTS | {
                                     "open", "sys._getframe", "sys._current_frames", "object.__getattr__",
                                     "sys.settrace", "sys.setprofile", "os.kill", "os.killpg",
                                     "signal.pthread_kill"})

    def _realpath(self, fn: str) -> str:
        # Cached: this runs inside the audit hook, possibly on hot paths.
        rp = self._rp_cache.get(fn)
        if rp is None:
            rp = fn if fn.startswith("<") else os.path.realpath(fn)
            if len(self._rp_cache) < 10000:
                self._rp_cache[fn] = rp
        return rp

    # -- origin of the event: the innermost frame that is neither stdlib nor harness ---------------------------
    def _origin(self) -> str:
        f = self._getframe(2)
        while f is not None:
            fn = f.f_code.co_filename
            rp = self._realpath(fn)
            if rp == self.answer_file:
                return "answer"
            if rp.startswith(self.site_dirs):
                rest = rp[len(next(d for d in self.site_dirs if rp.startswith(d))):]
                return "library:" + rest.split(os.sep, 1)[0]
            if fn.startswith("<") or rp.startswith(self.stdlib_dirs) or rp in self.harness_files:
                f = f.f_back
                continue
            return "other:" + rp
        return "unknown"

    def _direct_caller_is_answer(self) -> bool:
        # For frame access: only direct calls from answer code (through inspect.py) count, so stdlib helpers
        # that look at their caller's frame (namedtuple, enum, logging) are not reported.
        f = self._getframe(1)
        while f is not None and self._realpath(f.f_code.co_filename) in self.harness_files:
            f = f.f_back  # the hook's own frames
        while f is not None and self._realpath(f.f_code.co_filename) in self.inspect_files:
            f = f.f_back
        return f is not None and self._realpath(f.f_code.co_filename) == self.answer_file

    def _outside(self, path: Any) -> bool:
        if isinstance(path, int):
            return False
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            path = os.fspath(path)
        rp = os.path.realpath(path)
        if rp in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"):
            return False
        return not any(rp == r or rp.startswith(r + os.sep) for r in self.roots)

    def _other_proc(self, path: Any) -> str | None:
        """The path if it names another process's ``/proc`` entry, after normalising it (``/proc/self/../<pid>``,
        relative paths and symlinks resolve to what the kernel opens), else None."""
        if not isinstance(path, (str, bytes)):
            return None
        p = os.fsdecode(path)
        for cand in (os.path.abspath(p), os.path.realpath(p)):
            parts = cand.split("/")
            if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != self.pid:
                return p
        return None

    def _violation(self, flag: str, detail: str, block: bool = True) -> None:
        if flag not in self.seen:
            self.seen.append(flag)
        try:
            self.sender.send({"type": "event", "flag": flag, "detail": detail[:300]})
        except OSError:
            pass
        if block:
            raise PermissionError(f"blocked by the evaluation harness: {flag} ({detail[:200]})")

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.enforcing or self.busy or event not in self.watched:
            return
        self.busy = True
        try:
            self._check(event, args)
        finally:
            self.busy = False

    def _check(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            if writing and self._outside(path):
                self._violation("write_outside_workdir", f"open({path!r}, {mode!r})")
            other = self._other_proc(path)
            if other is not None:
                self._violation("proc_access", other)
            return
        if event in self._WRITE_PATH_EVENTS:
            idx = self._WRITE_PATH_EVENTS[event]
            for i in (idx if isinstance(idx, tuple) else (idx,)):
                if i < len(args) and args[i] is not None and self._outside(args[i]):
                    self._violation("write_outside_workdir", f"{event}({args[i]!r})")
            return
        if event in self._SPAWN_EVENTS:
            origin = self._origin()
            if not any(origin == "library:" + p for p in self.allowed_spawn_pkgs):
                self._violation("spawned_process", f"{event} {str(args[:2])[:200]} from {origin}")
            return
        if event in self._NET_EVENTS:  # from anywhere: nothing in an evaluation needs the network
            self._violation("network_access", f"{event} {str(args)[:200]}")
            return
        if event in self._CTYPES_EVENTS:  # torch/triton use ctypes internally; answer code may not
            if self._origin() == "answer":
                self._violation("ctypes_use", event)
            return
        if event in self._GC_EVENTS:
            if self._origin() == "answer":
                self._violation("gc_introspection", event)
            return
        if event in ("sys._getframe", "sys._current_frames"):
            if self._direct_caller_is_answer():
                self._violation("frame_inspection", event)
            return
        if event == "object.__getattr__":
            name = args[1] if len(args) > 1 else ""
            if name in ("tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back") and self._direct_caller_is_answer():
                self._violation("frame_inspection", f"getattr {name}")
            return
        if event in ("sys.settrace", "sys.setprofile"):
            if self._origin() == "answer":
                self._violation("tracing", event)
            return
        if event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            if self._origin() == "answer":
                self._violation("signal_sent", f"{event}{args}")
            return


def _empty_grid(grid: Any) -> bool:
    """True when a launch grid (a tuple of up to three sizes) has no program in it."""
    try:
        return any(int(g) <= 0 for g in tuple(grid)[:3])
    except (TypeError, ValueError):
        return False


class LaunchCounter:
    """Counts Triton kernel launches: the interpreter's grid executor (TRITON_INTERPRET=1) and, compiled, the
    launch-enter hook that Triton's launcher calls (``knobs.runtime.launch_enter_hook``: a hook chain in recent
    Triton, a single callable in older ones, ``CompiledKernel.launch_enter_hook`` in the oldest). A compiled-mode
    call counts only when the hook's nearest Python caller is Triton's own code (the answer calling the hook
    chain itself does not count), and a launch over an empty grid (no program runs) never counts. While ``bare`` is set (the timed calls), the hook only counts: inspecting the
    caller's frame costs microseconds per launch (and an audit event), which must not land in a timing window."""

    def __init__(self) -> None:
        import triton

        self.count = 0
        self.bare = False
        self.empty_grid = False  # the launch being made has an empty grid (compiled mode; see below)
        self._getframe = sys._getframe
        self.installed: list[tuple[Any, str, Any]] = []  # (owner, attribute, our object): checked for tampering
        try:
            import triton.knobs as knobs  # Triton >= 3.4
        except ImportError:
            knobs = None
        self.interpret = bool(knobs.runtime.interpret) if knobs is not None else os.environ.get(
            "TRITON_INTERPRET", "0") not in ("", "0")
        self.triton_dir = os.path.dirname(os.path.realpath(triton.__file__)) + os.sep
        self.chain: Any = None
        counter = self
        if self.interpret:
            from triton.runtime.interpreter import GridExecutor, interpreter_builder

            orig = GridExecutor.__call__
            set_grid_idx = interpreter_builder.set_grid_idx
            self._programs = 0

            def counted_program(*args: Any, **kwargs: Any) -> Any:
                counter._programs += 1
                return set_grid_idx(*args, **kwargs)

            def counted_call(self_: Any, *args: Any, **kwargs: Any) -> Any:
                before = counter._programs
                try:
                    return orig(self_, *args, **kwargs)
                finally:
                    if counter._programs > before:  # an empty grid runs no program: not a launch
                        counter.count += 1

            GridExecutor.__call__ = counted_call
            interpreter_builder.set_grid_idx = counted_program
            self.installed += [(GridExecutor, "__call__", counted_call),
                               (interpreter_builder, "set_grid_idx", counted_program)]
            return
        # Compiled: Triton computes the launch's metadata from its grid right before calling the launcher (only
        # while a launch hook is installed, as here); an empty grid launches nothing, so the hook call that follows
        # is not counted.
        from triton.compiler.compiler import CompiledKernel

        launch_metadata = CompiledKernel.launch_metadata

        def grid_noted(self_: Any, grid: Any, *args: Any, **kwargs: Any) -> Any:
            counter.empty_grid = _empty_grid(grid)
            return launch_metadata(self_, grid, *args, **kwargs)

        CompiledKernel.launch_metadata = grid_noted
        self.installed.append((CompiledKernel, "launch_metadata", grid_noted))
        hook = self._make_hook()
        self.hook = hook
        if knobs is not None:
            current = knobs.runtime.launch_enter_hook
            if hasattr(current, "add") and hasattr(current, "calls"):
                current.add(hook)
                self.chain = current
                return
            if current is not None:
                prev = current

                def both(*a: Any, **k: Any) -> Any:
                    hook(*a, **k)
                    return prev(*a, **k)

                knobs.runtime.launch_enter_hook = both
                self.installed.append((knobs.runtime, "launch_enter_hook", both))
            else:
                knobs.runtime.launch_enter_hook = hook
                self.installed.append((knobs.runtime, "launch_enter_hook", hook))
            return
        from triton.compiler.compiler import CompiledKernel  # oldest Triton: a class attribute

        CompiledKernel.launch_enter_hook = staticmethod(hook)
        self.installed.append((CompiledKernel, "launch_enter_hook", CompiledKernel.__dict__["launch_enter_hook"]))

    def _make_hook(self) -> Callable[..., None]:
        counter = self
        triton_dir = self.triton_dir
        getframe = self._getframe
        known: dict[str, bool] = {}  # co_filename -> inside the triton package (cached: this runs per launch)

        def on_launch(*_args: Any, **_kw: Any) -> None:
            if counter.empty_grid:
                counter.empty_grid = False
                return
            if counter.bare:
                counter.count += 1
                return
            f = getframe(1)
            while f is not None and f.f_code.co_filename.endswith("knobs.py"):
                f = f.f_back  # the hook chain's own frame
            if f is None:
                return
            fn = f.f_code.co_filename
            ok = known.get(fn)
            if ok is None:
                ok = known[fn] = os.path.realpath(fn).startswith(triton_dir) and not fn.endswith("knobs.py")
            if ok:
                counter.count += 1

        return on_launch

    def take(self) -> int:
        n, self.count = self.count, 0
        return n

    def intact(self) -> bool:
        for owner, attr, obj in self.installed:
            cur = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
            if cur is not obj:
                return False
        if self.chain is not None:
            import triton.knobs as knobs

            if knobs.runtime.launch_enter_hook is not self.chain or self.hook not in self.chain.calls:
                return False
        return True


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
        for m in ("torch", "time", "os", "sys", "builtins", "json", "hmac", "triton",
                  *(f"{PACKAGE}.{name}" for name in HARNESS_MODULES)):
            g[f"sys.modules[{m}]"] = (lambda m=m: sys.modules.get(m))
        g["select.select"] = lambda: select.select
        g["hmac.new"] = lambda: hmac.new
        g["json.dumps"] = lambda: json.dumps
        # Values, not identities.
        g["tf32:cuda_matmul_allow_tf32"] = lambda: bool(torch.backends.cuda.matmul.allow_tf32)
        g["tf32:cudnn_allow_tf32"] = lambda: bool(torch.backends.cudnn.allow_tf32)
        g["tf32:float32_matmul_precision"] = lambda: _call_str(torch.get_float32_matmul_precision)
        g["default_dtype"] = lambda: str(torch.get_default_dtype())
        # Informational only (reported as global_state_changed:<name>): they tune the answer's own PyTorch calls.
        g["info:cudnn.benchmark"] = lambda: bool(torch.backends.cudnn.benchmark)
        g["info:cudnn.deterministic"] = lambda: bool(torch.backends.cudnn.deterministic)
        g.update(extra)
        self.getters = g
        self.expected = {k: f() for k, f in g.items()}
        self._value_keys = {k for k in g if k.startswith(("tf32:", "info:", "default_dtype"))}
        self.launch = launch

    def changed(self) -> list[str]:
        bad = []
        for k, f in self.getters.items():
            try:
                v = f()
            except Exception:  # noqa: BLE001 - a getter that now raises means something was replaced
                bad.append(k)
                continue
            exp = self.expected[k]
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
