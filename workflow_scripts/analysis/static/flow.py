"""Flow analysis: walks ``ModelNew.forward`` (and every other function) the way it runs, inferring types.

This module holds the walk itself (its state, the roots, binding a call's arguments to a function's parameters);
the walk's parts are mixed in, one concern each: statements.py (control flow, assignments), expressions.py (the
type of each expression), calls.py (what a call does) and library.py (what calls into the libraries return).

It decides ``keeps_torch_op`` and records the events the try/except findings need (torch ops, kernel launches,
allocations, by ``try`` body and handler); memoisation findings (caches keyed on pointers / ids / shapes) come
from the same walk, since only the inferred types tell a pointer or a shape from any other value.

The rule for ``keeps_torch_op`` (published: "forward() still calls a torch layer, functional op, tensor math
method or arithmetic on inputs")
----------------------------------------------------------------------------------------------------------------
The body of ``ModelNew.forward`` is walked statement by statement (both branches of every ``if``, loop bodies,
``try`` bodies and handlers, lambdas and comprehensions) and so is everything it calls *in the same module*,
transitively: module functions, methods of ``ModelNew`` and its module-local base classes (``self.helper(x)``,
``super().forward(x)``), nested functions, local ``nn.Module`` classes held in attributes (their ``forward``),
``torch.autograd.Function`` subclasses (``Fn.apply(...)`` -> ``Fn.forward``), lambdas and module-level objects
(``_act = nn.GELU()`` at top level, then ``_act(x)``). ``@triton.jit`` kernels
are never entered: their ``tl.*`` math is the Triton part. Every one of these counts as a kept op (``torch_ops_kept``
names them, in order of first appearance):

- ``layer:<class>`` - calling an ``nn.*`` module: ``self.conv(x)`` where an attribute was assigned
  ``nn.Conv2d(...)`` (also ``nn.Sequential``, elements of ``nn.ModuleList``, ``self.conv.forward(x)``, other methods
  of such a module, ``nn.ReLU()(x)``). Parameters and buffers (``nn.Parameter``, ``register_buffer``) are tensors,
  not layers; reading ``self.conv.weight`` is not a call. ``nn.Identity`` is not counted (it computes nothing).
- ``functional:torch.nn.functional.<f>`` - any ``F.*`` / ``torch.nn.functional.*`` call.
- ``torch:torch.<f>`` - any other ``torch.*`` call (``torch.matmul``, ``torch.relu``, ``torch.sum``, ``torch.cat``,
  ``torch.where``, ``torch.linalg.*``, ``torch.ops.aten.*`` ...; ``torch.ops.<ns>`` of a namespace the answer
  registered itself, e.g. a ``torch.library.custom_op`` around its kernel, does not count) EXCEPT allocation /
  creation / layout / meta helpers:
  ``torch.empty*``, ``zeros*``, ``ones*``, ``full*``, ``arange``, ``linspace``, ``eye``, ``tensor``, ``as_tensor``,
  ``rand*``/``randn*``, ``reshape``, ``flatten``, ``permute``, ``transpose``, ``squeeze``/``unsqueeze``, ``split``,
  ``chunk``, ``clone``, ``numel``, ``Size``, dtypes/devices/``finfo``, grad-mode and seed functions, and the
  namespaces ``torch.cuda``, ``torch.backends``, ``torch.jit``, ``torch._dynamo``, ``torch.library``,
  ``torch.utils``, ``torch.autograd``, ``torch.nn.init``, ``torch.nn.utils`` ...
- ``method:Tensor.<m>`` - a method call on a tensor that is not a layout/meta/copy helper: ``x.sum()``,
  ``x.exp()``, ``x.mean()``, ``x.max()``, ``x.clamp()``, ``x.matmul()``, ``x.add_()``, ``x.masked_fill()`` ...
  Not counted: ``.view .reshape .contiguous .permute .transpose .t .flatten .expand .unsqueeze .squeeze .narrow
  .split .chunk .to .float .half .cuda .cpu .clone .detach .copy_ .zero_ .fill_ .new_empty ...`` and the
  int/meta queries ``.size .shape .stride .numel .dim .data_ptr .item .is_contiguous ...``.
- ``operator:<op>`` - arithmetic, matmul or comparison on a tensor: ``x + y``, ``x * 2``, ``x @ w``, ``-x``,
  ``x > 0``, ``x += b``, ``abs(x)``, ``max(x, y)``.
- a torch function (or a layer, a lambda, the answer's own function) passed as a value to a call that may call it:
  ``map``/``filter``/``sorted``/``min``/``max``, ``functools.reduce`` or any other library's function, torch's
  higher-order functions (``torch.vmap``, ``torch.func.*``, ``torch.compile``, ``torch.utils.checkpoint``); it counts
  as the op it is, and the answer's own callables are walked with the items they are called on. Functions kept in
  a dict and looked up, parameter defaults (``def f(x, op=torch.relu)``) and class attributes keep their type; a
  computed ``getattr`` on torch or a tensor names ``torch:torch.<computed>`` / ``method:Tensor.<computed>``;
  ``importlib.import_module("torch")`` and ``__import__("torch")`` are torch.

A forward-flow type inference decides what is a tensor. Tensors: ``forward``'s parameters (except ones annotated
``int``/``float``/``bool`` or with a numeric default), ``self.<attr>`` assigned an ``nn.Parameter``/buffer/tensor,
``weight``/``bias``/``running_*`` of module attributes, results of ``torch.*`` calls (allocations included),
layers, tensor methods, indexing/iterating a tensor, and a helper's return value. Ints: constants, ``x.shape``,
``x.size()``, ``x.stride()``, ``x.numel()``, ``x.dim()``, ``x.item()``, ``len()``, ``int()``, ``math.*``,
``triton.cdiv``, ``triton.next_power_of_2`` and arithmetic on ints, so ``n = x.shape[0] * x.shape[1]`` and
``(n + BLOCK - 1) // BLOCK`` keep nothing. Unknown values (``__init__`` arguments, ``self.scale`` set from one)
count only when combined with a tensor. Helper parameters take the types of the call's arguments (memoised per
argument types). Types of a name are merged across ``if`` branches (a tensor on either side stays a tensor).
The walk is bounded (type sizes, six argument-type variants per function, a step budget); code nested past
Python's recursion limit gets the ``analysis_incomplete`` flag and partial results.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from .calls import Calls
from .checks import Finding
from .expressions import Expressions
from .lattice import I, O, SelfTy, Seq, T, Ty, clip, join, join_all, refs
from .library import LibraryCalls
from .statements import Statements
from .symbols import FuncNode, ModuleTables

_MAX_DEPTH = 40
# Deterministic work budget (statements + expressions visited). Past it, calls are no longer followed and loop
# bodies are walked once: pathological answers end in bounded time with what was found so far.
_STEP_BUDGET = 200_000
# At most this many argument-type variants of one function are analysed; further calls reuse their union.
_MAX_VARIANTS = 6

Event = tuple[str, str, int]  # (kind: "op" | "launch" | "alloc", name, line)


@dataclass
class Frame:
    env: dict[str, Ty]
    cls: str | None  # the class that defines the function being analysed (for super())
    self_ty: Ty | None
    returns: list[Ty] = field(default_factory=list)
    globals_declared: set[str] = field(default_factory=set)
    nested: dict[str, int] = field(default_factory=dict)


class Flow(Statements, Expressions, Calls, LibraryCalls):
    """Walks code the way it runs, inferring types and recording torch ops, launches and allocations."""

    def __init__(self, tables: ModuleTables, emit: bool = True) -> None:
        self.t = tables
        self.emit = emit
        # Ordered sets of events, one per call being analysed (memo summaries) and per root.
        self.captures: list[dict[Event, None]] = []
        self.steps = 0
        self.regions: list[tuple[str, int]] = []
        self.region_events: dict[tuple[str, int], dict[Event, None]] = {}
        self.try_nodes: dict[int, ast.AST] = {}
        self.findings: list[Finding] = []
        self.memo: dict[tuple, tuple[Ty, tuple[Event, ...]]] = {}
        self.active: set[tuple] = set()
        self.variants: dict[int, list[tuple]] = {}
        self.incomplete = False  # a recursion overflow cut the walk short
        self.depth = 0
        self.lambdas: dict[int, tuple[ast.Lambda, dict[str, Ty]]] = {}
        self.nested_defs: dict[int, tuple[FuncNode, dict[str, Ty], str | None, Ty | None]] = {}
        self.frame = Frame({}, None, None)

    # -- recording --
    def record(self, kind: str, name: str, line: int) -> None:
        ev = (kind, name, line)
        for capture in self.captures:
            capture[ev] = None
        for r in self.regions:
            bucket = self.region_events.setdefault(r, {})
            bucket[ev] = None

    @property
    def over_budget(self) -> bool:
        return self.steps > _STEP_BUDGET

    def finding(self, check: str, node: ast.AST, message: str) -> None:
        if self.emit:
            self.findings.append(Finding(check, getattr(node, "lineno", 0), message))

    # -- roots --
    def run_root(self, fn: FuncNode, cls: str | None = None, self_ty: Ty | None = None) -> list[Event]:
        params = self._params(fn)
        if self_ty is not None and params and not self._is_static(fn):
            params = params[1:]
        args = [self._root_param_type(a, d) for a, d in params]
        self.captures.append({})
        try:
            self.call_function(fn, self_ty if not self._is_static(fn) else None, args, {}, cls)
        except RecursionError:
            self.incomplete = True  # keep what was recorded before the overflow
        finally:
            events = self.captures.pop()
        return list(events)

    def run_body(self, stmts: list[ast.stmt], env_out: dict[str, Ty] | None = None) -> list[Event]:
        saved, self.frame = self.frame, Frame({}, None, None)
        self.captures.append({})
        try:
            self.block([s for s in stmts if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                  ast.ClassDef))])
        except RecursionError:
            self.incomplete = True
        finally:
            if env_out is not None:
                env_out.update(self.frame.env)
            self.frame = saved
            events = self.captures.pop()
        return list(events)

    @staticmethod
    def _params(fn: FuncNode) -> list[tuple[ast.arg, ast.expr | None]]:
        a = fn.args
        positional = a.posonlyargs + a.args
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        return list(zip(positional, defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))

    def _is_static(self, fn: FuncNode) -> bool:
        return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)

    def _is_classmethod(self, fn: FuncNode) -> bool:
        return any(isinstance(d, ast.Name) and d.id == "classmethod" for d in fn.decorator_list)

    @staticmethod
    def _annotation_type(ann: ast.AST | None) -> Ty | None:
        if isinstance(ann, ast.Name) and ann.id in ("int", "float", "bool"):
            return I
        if isinstance(ann, ast.Name) and ann.id == "str":
            return O
        if isinstance(ann, ast.Constant) and ann.value in ("int", "float", "bool"):
            return I
        return None

    def _root_param_type(self, arg: ast.arg, default: ast.expr | None) -> Ty:
        # Forward's parameters are tensors unless their annotation or default says they are python scalars.
        ann = self._annotation_type(arg.annotation)
        if ann is not None:
            return ann
        if isinstance(default, ast.Constant) and isinstance(default.value, (bool, int, float, str)):
            return I if not isinstance(default.value, str) else O
        return T

    # -- calls into the answer's own code --
    def call_function(self, fn: FuncNode, self_ty: Ty | None, args: Sequence[Ty], kwargs: dict[str, Ty],
                      cls: str | None, closure: dict[str, Ty] | None = None) -> Ty:
        if id(fn) in self.t.kernel_nodes:
            return O
        args = [clip(a) for a in args]
        kwargs = {k: clip(v) for k, v in kwargs.items()}
        key = (id(fn), self_ty, tuple(args), tuple(sorted(kwargs.items(), key=lambda kv: kv[0])))
        if key in self.memo:
            ret, events = self.memo[key]
            for ev in events:
                self.record(*ev)
            return ret
        known = self.variants.setdefault(id(fn), [])
        if len(known) >= _MAX_VARIANTS:
            ret = O
            for k in known:
                if k in self.memo:
                    r, events = self.memo[k]
                    ret = join(ret, r)
                    for ev in events:
                        self.record(*ev)
            return ret
        if key in self.active or self.depth >= _MAX_DEPTH or self.over_budget:
            return O  # recursion / budget: no further information
        known.append(key)
        self.active.add(key)
        self.depth += 1
        saved = self.frame
        self.frame = Frame(dict(closure or {}), cls, self_ty)
        self.captures.append({})
        try:
            self._bind(fn, self_ty, list(args), kwargs)
            self.block(fn.body)
            ret = join_all(self.frame.returns)
        finally:
            self.frame = saved
            self.depth -= 1
            self.active.discard(key)
            events = self.captures.pop()
        self.memo[key] = (ret, tuple(events))
        return ret

    def _bind(self, fn: FuncNode, self_ty: Ty | None, args: list[Ty], kwargs: dict[str, Ty]) -> None:
        params = self._params(fn)
        env = self.frame.env
        if self_ty is not None and params:
            env[params[0][0].arg] = self_ty
            params = params[1:]
        n_pos = len(fn.args.posonlyargs) + len(fn.args.args) - (1 if self_ty is not None else 0)
        for i, (arg, default) in enumerate(params):
            if i < n_pos and i < len(args):
                ty = args[i]
            elif arg.arg in kwargs:
                ty = kwargs[arg.arg]
            elif default is not None:
                ty = self._default_type(default)
            else:
                ty = O
            ann = self._annotation_type(arg.annotation)
            env[arg.arg] = ann if ann is not None and ty is O else ty
        if fn.args.vararg:
            env[fn.args.vararg.arg] = Seq(join_all(args[n_pos:]))
        if fn.args.kwarg:
            env[fn.args.kwarg.arg] = O

    def _default_type(self, node: ast.AST) -> Ty:
        """A parameter's default: a number, or a function or layer named by it (``def f(x, op=torch.relu)``)."""
        dotted = self.t.dotted(node)
        if dotted and not dotted.startswith("builtins."):
            return refs(dotted)
        if isinstance(node, ast.Name) and node.id in self.t.functions:
            return refs(f"func:{node.id}")
        return self._const_type(node)

    @staticmethod
    def _const_type(node: ast.AST) -> Ty:
        if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float, complex)):
            return I
        return O

    # -- hooks of LibraryCalls --
    def super_type(self) -> Ty:
        f = self.frame
        if isinstance(f.self_ty, SelfTy) and f.cls is not None:
            return SelfTy(f.self_ty.cls, super_of=f.cls)
        return O


def prescan_attributes(tables: ModuleTables) -> None:
    """Type module-level names and every class's self.<attr> (``__init__`` first) before any root is analysed."""
    for _ in range(2):  # twice: attributes built from other attributes
        flow = Flow(tables, emit=False)
        env: dict[str, Ty] = {}
        flow.run_body(tables.tree.body, env_out=env)
        # Only names the tables do not already resolve better (functions, classes, imports).
        tables.module_env = {k: v for k, v in env.items() if v is not O and k not in tables.imports
                             and k not in tables.functions and k not in tables.classes}
        for name, info in tables.classes.items():
            # Class-level names first (f = torch.relu in the class body): self.f and Cls.f read them.
            for stmt in info.node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    ty = flow.expr(stmt.value)
                    if ty is not O:
                        info.attrs[stmt.targets[0].id] = join(info.attrs.get(stmt.targets[0].id, O), ty)
            methods = sorted(info.methods.items(), key=lambda kv: kv[0] != "__init__")
            for mname, fn in methods:
                if flow._is_static(fn) or not flow._params(fn):
                    continue
                try:
                    if mname == "__init__":
                        params = flow._params(fn)[1:]
                        args = [flow._annotation_type(a.annotation) or flow._const_type(d) if d is not None
                                else (flow._annotation_type(a.annotation) or O) for a, d in params]
                        flow.call_function(fn, SelfTy(name), args, {}, name)
                    else:
                        flow.run_root(fn, name, SelfTy(name))
                except RecursionError:
                    continue
