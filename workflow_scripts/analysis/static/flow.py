"""Flow analysis: walks ``ModelNew.forward`` (and every other function) the way it runs, inferring types.

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
import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .checks import CACHE_DECORATORS, Finding
from .lattice import (I, O, P, S, T, Bound, LambdaTy, Mod, Refs, SelfTy, Seq, Tup, Ty, clip, contains,
                      container_elem, elem_of, join, join_all, refs)
from .library import LibraryCalls
from .symbols import FuncNode, ModuleTables
from .vocabulary import (MODULE_NONCOMPUTE_METHODS, NN_NO_COMPUTE, NN_NONCALLABLE_CONTAINERS,
                         TENSOR_MATH_METHODS_STRICT, TENSOR_TENSOR_ATTRS)

_BINOP = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.MatMult: "@", ast.Div: "/", ast.FloorDiv: "//",
          ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^",
          ast.BitAnd: "&"}
_CMPOP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
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


class Flow(LibraryCalls):
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

    # -- statements --
    def block(self, stmts: Iterable[ast.stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        self.steps += 1
        f = self.frame
        passes = 1 if self.over_budget else 2
        if isinstance(s, ast.Expr):
            self.expr(s.value)
        elif isinstance(s, ast.Assign):
            ty = self.expr(s.value)
            for target in s.targets:
                self.assign(target, ty)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.expr(s.value))
        elif isinstance(s, ast.AugAssign):
            cur = self.expr(s.target)
            val = self.expr(s.value)
            if cur is T or val is T:
                self.record("op", f"operator:{_BINOP.get(type(s.op), '?')}=", s.lineno)
                res: Ty = T
            else:
                res = self._binop_type(cur, val, s.op)
            self.assign(s.target, res)
        elif isinstance(s, ast.Return):
            f.returns.append(self.expr(s.value) if s.value is not None else O)
        elif isinstance(s, ast.If):
            self.expr(s.test)
            self._branches([s.body, s.orelse])
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            item = elem_of(self.expr(s.iter))
            before = dict(f.env)
            for _ in range(passes):  # twice so loop-carried types settle
                self.assign(s.target, item)
                self.block(s.body)
            self.frame.env = self._merge(before, self.frame.env)
            self.block(s.orelse)
        elif isinstance(s, ast.While):
            before = dict(f.env)
            for _ in range(passes):
                self.expr(s.test)
                self.block(s.body)
            self.frame.env = self._merge(before, self.frame.env)
            self.block(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                ctx = self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, ctx if ctx is T else O)
            self.block(s.body)
        elif isinstance(s, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self._try(s)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if id(s) in self.t.kernel_nodes:
                f.env[s.name] = refs(f"kernel:{s.name}")
            else:
                self.nested_defs[id(s)] = (s, f.env, f.cls, f.self_ty)
                f.env[s.name] = refs(f"local:{id(s)}")
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            for alias in s.names:
                name = alias.asname or alias.name.split(".")[0]
                if isinstance(s, ast.ImportFrom):
                    if s.module and alias.name != "*":
                        f.env[name] = refs(f"{s.module}.{alias.name}")
                else:
                    f.env[name] = refs(alias.name if alias.asname else name)
        elif isinstance(s, ast.Global):
            f.globals_declared.update(s.names)
        elif isinstance(s, (ast.Raise,)):
            if s.exc is not None:
                self.expr(s.exc)
        elif isinstance(s, ast.Assert):
            self.expr(s.test)
        elif isinstance(s, ast.Delete):
            for target in s.targets:
                self.expr(target)
        elif isinstance(s, ast.Match):
            self.expr(s.subject)
            self._branches([c.body for c in s.cases])
        # ClassDef, Pass, Break, Continue, Nonlocal: nothing to type.

    def _branches(self, bodies: list[list[ast.stmt]]) -> None:
        before = self.frame.env
        merged: dict[str, Ty] | None = None
        for body in bodies:
            self.frame.env = dict(before)
            self.block(body)
            merged = self.frame.env if merged is None else self._merge(merged, self.frame.env)
        self.frame.env = merged if merged is not None else before

    @staticmethod
    def _merge(a: dict[str, Ty], b: dict[str, Ty]) -> dict[str, Ty]:
        out = dict(a)
        for k, v in b.items():
            out[k] = join(out[k], v) if k in out else v
        return out

    def _try(self, s: ast.AST) -> None:
        rid = id(s)
        self.try_nodes[rid] = s
        self.regions.append(("body", rid))
        try:
            self.block(s.body)
        finally:
            self.regions.pop()
        for h in s.handlers:
            if h.type is not None:
                self.expr(h.type)
            if h.name:
                self.frame.env[h.name] = O
            self.regions.append(("handler", rid))
            try:
                self.block(h.body)
            finally:
                self.regions.pop()
        self.block(s.orelse)
        self.block(s.finalbody)

    # -- assignment --
    def assign(self, target: ast.AST, ty: Ty) -> None:
        f = self.frame
        if isinstance(target, ast.Name):
            f.env[target.id] = ty
            if target.id in f.globals_declared and contains(ty, P):
                self.finding("output_memoization", target,
                             f"stores a data_ptr()/id() value in the global {target.id!r}")
        elif isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            n = len(elts)
            if isinstance(ty, Tup) and len(ty.elts) == n:
                parts = list(ty.elts)
            else:
                parts = [elem_of(ty) if ty is not T else T] * n
            for e, p in zip(elts, parts):
                if isinstance(e, ast.Starred):
                    self.assign(e.value, Seq(p))
                else:
                    self.assign(e, p)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, Seq(elem_of(ty)))
        elif isinstance(target, ast.Attribute):
            base = self.expr(target.value)
            if isinstance(base, SelfTy) and base.cls in self.t.classes:
                attrs = self.t.classes[base.cls].attrs
                attrs[target.attr] = join(attrs.get(target.attr, O), ty)
                if contains(ty, P):
                    self.finding("output_memoization", target, f"stores a data_ptr()/id() value in self.{target.attr}")
        elif isinstance(target, ast.Subscript):
            container = self.expr(target.value)
            key = self.expr(target.slice)
            self._cache_key(container, key, ty, target, store=True)

    def _cache_key(self, container: Ty, key: Ty, value: Ty, node: ast.AST, store: bool) -> None:
        if container in (T, S, I) or isinstance(container, (Tup, Seq, Mod)):
            return  # indexing a tensor / shape / list is not a cache
        if contains(key, P):
            self.finding("output_memoization", node, "a cache keyed on data_ptr()/id()/hash()")
        elif store and contains(key, S):
            if contains(value, T):
                self.finding("output_memoization", node, "a tensor cached under an input shape key")
            else:
                self.finding("shape_keyed_cache", node, "a value cached under an input shape key")

    # -- expressions --
    def expr(self, node: ast.AST | None) -> Ty:
        if node is None:
            return O
        self.steps += 1
        method = getattr(self, f"_e_{type(node).__name__}", None)
        if method is None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child)
            return O
        return clip(method(node))

    def _e_Constant(self, node: ast.Constant) -> Ty:
        return I if isinstance(node.value, (bool, int, float, complex)) else O

    def _e_Name(self, node: ast.Name) -> Ty:
        name = node.id
        f = self.frame
        if name in f.env:
            return f.env[name]
        t = self.t
        if name in t.functions:
            return refs(f"func:{name}")
        if name in t.kernels:
            return refs(f"kernel:{name}")
        if name in t.classes:
            return refs(f"class:{name}")
        if name in t.class_aliases:
            return refs(f"class:{t.class_aliases[name]}")
        if name in t.local_refs:
            return refs(t.local_refs[name])
        if name in t.imports:
            return refs(t.imports[name])
        if name in t.module_env:
            return t.module_env[name]
        if name in t.constants:
            return t.constants[name]
        if callable(getattr(builtins, name, None)):
            return refs(f"builtins.{name}")
        return O

    def _e_Attribute(self, node: ast.Attribute) -> Ty:
        return self.attr_of(self.expr(node.value), node.attr)

    def attr_of(self, base: Ty, attr: str) -> Ty:
        t = self.t
        if isinstance(base, Refs):
            names = set()
            for r in base.names:
                if r.startswith("class:") and "." not in r:
                    cls = r[len("class:"):]
                    info = t.classes.get(cls)
                    if attr in t.class_kernels(cls):
                        names.add(f"kernel:{attr}")
                    elif t.lookup_method(cls, attr) or (attr == "apply" and info is not None and info.is_autograd_fn):
                        names.add(f"{r}.{attr}")
                    elif isinstance(t.lookup_attr(cls).get(attr), Refs):  # a class attribute: Ops.f = torch.relu
                        names |= t.lookup_attr(cls)[attr].names
                elif ":" not in r:
                    names.add(f"{r}.{attr}")
            return Refs(frozenset(names)) if names else O
        if isinstance(base, SelfTy):
            if base.super_of is None:
                attrs = t.lookup_attr(base.cls)
                if attr in attrs:
                    return attrs[attr]
            if attr in t.class_kernels(base.cls):
                return refs(f"kernel:{attr}")
            found = t.lookup_method(base.cls, attr, after=base.super_of)
            if found:
                return refs(f"method:{base.cls}:{found[0]}.{attr}")
            return O
        if base is T:
            if attr == "shape":
                return S
            if attr == "ndim":
                return I
            if attr in TENSOR_TENSOR_ATTRS:
                return T
            if attr in ("dtype", "device", "is_cuda", "layout", "requires_grad", "is_leaf", "names"):
                return O
            return Bound(T, attr)
        if isinstance(base, Mod):
            if "weight" in attr or "bias" in attr or attr.startswith("running_"):
                return T  # parameters / buffers of a layer are tensors, not calls
            return Bound(base, attr)
        if base is O or base is S or isinstance(base, (Seq, Tup)):
            return Bound(base, attr)
        return O

    def _e_Subscript(self, node: ast.Subscript) -> Ty:
        base = self.expr(node.value)
        key = self.expr(node.slice)
        if base is T:
            return T
        if base is S:
            return S if isinstance(node.slice, ast.Slice) else I
        if isinstance(base, Tup):
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
                i = node.slice.value
                return base.elts[i] if -len(base.elts) <= i < len(base.elts) else O
            if isinstance(node.slice, ast.Slice):
                return Seq(join_all(base.elts))
            return join_all(base.elts)
        if isinstance(base, Seq):
            return base if isinstance(node.slice, ast.Slice) else base.elem
        if isinstance(base, Mod):
            return container_elem(base)
        if isinstance(base, Refs):
            return base  # kernel[grid], generic aliases: callers handle launches
        self._cache_key(base, key, O, node, store=False)
        return O

    def _e_BinOp(self, node: ast.BinOp) -> Ty:
        left = self.expr(node.left)
        right = self.expr(node.right)
        if left is T or right is T:
            self.record("op", f"operator:{_BINOP.get(type(node.op), '?')}", node.lineno)
            return T
        return self._binop_type(left, right, node.op)

    @staticmethod
    def _binop_type(left: Ty, right: Ty, op: ast.operator) -> Ty:
        if left in (I, P) and right in (I, P):
            return P if P in (left, right) else I
        if isinstance(op, ast.Add) and (left is S or right is S or isinstance(left, Tup) or isinstance(right, Tup)):
            if isinstance(left, Tup) and isinstance(right, Tup):
                return Tup(left.elts + right.elts)
            return S
        if isinstance(left, Seq) and isinstance(right, Seq):
            return join(left, right)
        if P in (left, right):
            return P  # f-strings / %-formatting of pointers stay tainted
        return O

    def _e_UnaryOp(self, node: ast.UnaryOp) -> Ty:
        v = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            return O
        if v is T and isinstance(node.op, (ast.USub, ast.Invert)):
            self.record("op", "operator:neg" if isinstance(node.op, ast.USub) else "operator:~", node.lineno)
            return T
        return v

    def _e_BoolOp(self, node: ast.BoolOp) -> Ty:
        return join_all(self.expr(v) for v in node.values)

    def _e_Compare(self, node: ast.Compare) -> Ty:
        types = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
        counted = False
        for op, left, right in zip(node.ops, types, types[1:]):
            if isinstance(op, (ast.In, ast.NotIn)):
                self._cache_key(right, left, O, node, store=False)
            elif (left is T or right is T) and type(op) in _CMPOP and not counted:
                self.record("op", f"operator:{_CMPOP[type(op)]}", node.lineno)
                counted = True
        return T if counted else O

    def _e_IfExp(self, node: ast.IfExp) -> Ty:
        self.expr(node.test)
        return join(self.expr(node.body), self.expr(node.orelse))

    def _e_NamedExpr(self, node: ast.NamedExpr) -> Ty:
        ty = self.expr(node.value)
        self.assign(node.target, ty)
        return ty

    def _e_Tuple(self, node: ast.Tuple) -> Ty:
        types = [self.expr(e) for e in node.elts]
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return Seq(join_all(elem_of(t) if isinstance(e, ast.Starred) else t for e, t in zip(node.elts, types)))
        return Tup(tuple(types))

    def _e_List(self, node: ast.List) -> Ty:
        return Seq(join_all(self.expr(e) for e in node.elts))

    def _e_Set(self, node: ast.Set) -> Ty:
        for e in node.elts:
            self.expr(e)
        return O

    def _e_Dict(self, node: ast.Dict) -> Ty:
        callables: list[Ty] = []
        for k, v in zip(node.keys, node.values):
            kt = self.expr(k) if k is not None else O
            vt = self.expr(v)
            if isinstance(vt, (Refs, Mod, LambdaTy)):
                callables.append(vt)
            if contains(kt, P):
                self.finding("output_memoization", node, "a dict keyed on data_ptr()/id()")
        # A table of functions ({"relu": torch.relu}[name](x)): its items are what a lookup calls.
        return Seq(join_all(callables)) if callables else O

    def _e_Starred(self, node: ast.Starred) -> Ty:
        return self.expr(node.value)

    def _e_JoinedStr(self, node: ast.JoinedStr) -> Ty:
        tainted = False
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                tainted |= contains(self.expr(v.value), P)
        return P if tainted else O

    def _e_Lambda(self, node: ast.Lambda) -> Ty:
        self.lambdas[id(node)] = (node, self.frame.env)
        saved = self.frame.env
        self.frame.env = dict(saved)
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            self.frame.env[a.arg] = O
        try:
            self.expr(node.body)  # a torch call in a lambda body counts where the lambda is made
        finally:
            self.frame.env = saved
        return LambdaTy(id(node))

    def _comprehension(self, generators: list[ast.comprehension], elts: list[ast.AST]) -> list[Ty]:
        saved = self.frame.env
        self.frame.env = dict(saved)
        try:
            for gen in generators:
                self.assign(gen.target, elem_of(self.expr(gen.iter)))
                for cond in gen.ifs:
                    self.expr(cond)
            return [self.expr(e) for e in elts]
        finally:
            self.frame.env = saved

    def _e_ListComp(self, node: ast.ListComp) -> Ty:
        return Seq(self._comprehension(node.generators, [node.elt])[0])

    _e_GeneratorExp = _e_ListComp

    def _e_SetComp(self, node: ast.SetComp) -> Ty:
        self._comprehension(node.generators, [node.elt])
        return O

    def _e_DictComp(self, node: ast.DictComp) -> Ty:
        self._comprehension(node.generators, [node.key, node.value])
        return O

    def _e_Await(self, node: ast.Await) -> Ty:
        return self.expr(node.value)

    # -- calls --
    def _e_Call(self, node: ast.Call) -> Ty:
        func = node.func
        if isinstance(func, ast.Subscript):
            callee = self.expr(func.value)
            self.expr(func.slice)
            args, kwargs = self._args(node)
            if isinstance(callee, Refs) and any(r.startswith("kernel:") for r in callee.names):
                name = next(r for r in sorted(callee.names) if r.startswith("kernel:"))[len("kernel:"):]
                self.record("launch", name, node.lineno)
                return O
            return self.call_value(self._subscript_value(callee), args, kwargs, node)
        self._self_container_update(node)
        callee = self.expr(func)
        args, kwargs = self._args(node)
        return self.call_value(callee, args, kwargs, node)

    def _subscript_value(self, base: Ty) -> Ty:
        if isinstance(base, Mod):
            return container_elem(base)
        return elem_of(base) if base is not T else O

    def _args(self, node: ast.Call) -> tuple[list[Ty], dict[str, Ty]]:
        args: list[Ty] = []
        for a in node.args:
            ty = self.expr(a)
            args.append(elem_of(ty) if isinstance(a, ast.Starred) else ty)
        kwargs: dict[str, Ty] = {}
        for k in node.keywords:
            ty = self.expr(k.value)
            if k.arg is not None:
                kwargs[k.arg] = ty
        return args, kwargs

    def _self_container_update(self, node: ast.Call) -> None:
        # self.layers.append(Block()) / self.register_buffer("w", t) / setattr(self, "w", v): typed attributes.
        func = node.func
        f = self.frame
        if not isinstance(func, ast.Attribute):
            if (isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) == 3
                    and isinstance(node.args[0], ast.Name) and isinstance(f.env.get(node.args[0].id), SelfTy)
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                cls = f.env[node.args[0].id].cls
                if cls in self.t.classes:
                    self.t.classes[cls].attrs[node.args[1].value] = self.expr(node.args[2])
            return
        recv = func.value
        if isinstance(recv, ast.Name) and isinstance(f.env.get(recv.id), SelfTy):
            cls = f.env[recv.id].cls
            if cls not in self.t.classes:
                return
            attrs = self.t.classes[cls].attrs
            if (func.attr in ("register_buffer", "register_parameter", "register_module", "add_module")
                    and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                attrs[node.args[0].value] = self.expr(node.args[1])
        elif (isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name)
              and isinstance(f.env.get(recv.value.id), SelfTy) and func.attr in ("append", "extend", "insert")):
            cls = f.env[recv.value.id].cls
            if cls not in self.t.classes:
                return
            attrs = self.t.classes[cls].attrs
            current = attrs.get(recv.attr)
            if isinstance(current, Mod) and node.args:
                item = self.expr(node.args[-1])
                if func.attr == "extend":
                    item = elem_of(item)
                if isinstance(item, Mod):
                    attrs[recv.attr] = Mod(current.quals, current.elems | {item})

    def call_value(self, callee: Ty, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if isinstance(callee, Refs):
            return join_all(self.call_ref(r, args, kwargs, node) for r in sorted(callee.names))
        if isinstance(callee, Mod):
            return self.call_module(callee, args, kwargs, node)
        if isinstance(callee, Bound):
            return self.call_method(callee.recv, callee.name, args, kwargs, node)
        if isinstance(callee, LambdaTy) and callee.key in self.lambdas:
            lam, closure = self.lambdas[callee.key]
            saved = self.frame.env
            env = dict(closure)
            params = lam.args.posonlyargs + lam.args.args
            for i, a in enumerate(params):
                env[a.arg] = args[i] if i < len(args) else kwargs.get(a.arg, O)
            self.frame.env = env
            try:
                return self.expr(lam.body)
            finally:
                self.frame.env = saved
        return O

    def call_ref(self, ref: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        t = self.t
        kind, _, rest = ref.partition(":")
        if not rest:
            return self.call_external(ref, args, kwargs, node)
        if kind == "func" and rest in t.functions:
            fn = t.functions[rest]
            if any(self._is_cache_decorator(d) for d in fn.decorator_list) and any(contains(a, T) for a in args):
                self.finding("output_memoization", node,
                             f"calls the memoised (lru_cache) function {rest!r} with tensors: cached by id")
            return self.call_function(fn, None, args, kwargs, None)
        if kind == "kernel":
            return O
        if kind == "local":
            entry = self.nested_defs.get(int(rest))
            if entry:
                fn, closure, cls, self_ty = entry
                return self.call_function(fn, None, args, kwargs, cls, closure=dict(closure))
            return O
        if kind == "method":
            recv_cls, _, qual = rest.partition(":")
            def_cls, _, name = qual.partition(".")
            fn = t.classes[def_cls].methods.get(name) if def_cls in t.classes else None
            if fn is None:
                return O
            if self._is_static(fn):
                return self.call_function(fn, None, args, kwargs, def_cls)
            if self._is_classmethod(fn):
                return self.call_function(fn, refs(f"class:{recv_cls}"), args, kwargs, def_cls)
            return self.call_function(fn, SelfTy(recv_cls), args, kwargs, def_cls)
        if kind == "class":
            cls, _, member = rest.partition(".")
            info = t.classes.get(cls)
            if info is None:
                return O
            if not member:
                if info.is_module:
                    return Mod(frozenset({f"local:{cls}"}))
                return O if info.is_autograd_fn else SelfTy(cls)  # plain local classes: instances typed by class
            if member == "apply" and info.is_autograd_fn:
                found = t.lookup_method(cls, "forward")
                if found:  # Fn.apply(*args) runs Fn.forward(ctx, *args)
                    return self.call_function(found[1], None, [O] + args, kwargs, found[0])
                return O
            found = t.lookup_method(cls, member)
            if found is None:
                return O
            def_cls, fn = found
            if self._is_classmethod(fn):
                return self.call_function(fn, refs(f"class:{cls}"), args, kwargs, def_cls)
            return self.call_function(fn, None, args, kwargs, def_cls)
        return O

    def _is_cache_decorator(self, dec: ast.AST) -> bool:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = self.t.dotted(target)
        return name in CACHE_DECORATORS

    def call_module(self, mod: Mod, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        ret: Ty = O
        for q in sorted(mod.quals):
            if q.startswith("local:"):
                cls = q[len("local:"):]
                found = self.t.lookup_method(cls, "forward")
                if found:
                    ret = join(ret, self.call_function(found[1], SelfTy(cls), args, kwargs, found[0]))
            elif q in NN_NONCALLABLE_CONTAINERS:
                continue
            elif q in NN_NO_COMPUTE:
                ret = join(ret, args[0] if args else O)
            elif q == "torch.nn.Sequential" and mod.elems:
                for e in sorted(mod.elems, key=repr):
                    ret = join(ret, self.call_module(e, args, kwargs, node) if isinstance(e, Mod) else O)
            else:
                self.record("op", f"layer:{q}", node.lineno)
                ret = T
        return ret

    def call_method(self, recv: Ty, name: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if recv is T:
            return self.tensor_method(name, args, node)
        if name == "data_ptr":
            return P  # x.untyped_storage().data_ptr() and friends
        if isinstance(recv, Mod):
            if name in ("forward", "__call__"):
                return self.call_module(recv, args, kwargs, node)
            if name in ("values", "children", "modules"):
                return Seq(container_elem(recv))
            if name == "items":
                return Seq(Tup((O, container_elem(recv))))
            if name in MODULE_NONCOMPUTE_METHODS:
                return O
            ret: Ty = O
            for q in sorted(recv.quals):
                if q.startswith("local:"):
                    cls = q[len("local:"):]
                    found = self.t.lookup_method(cls, name)
                    if found:
                        ret = join(ret, self.call_function(found[1], SelfTy(cls), args, kwargs, found[0]))
                elif q not in NN_NONCALLABLE_CONTAINERS and q not in NN_NO_COMPUTE:
                    self.record("op", f"layer:{q}", node.lineno)  # e.g. self.conv._conv_forward(x, w, b)
                    ret = T
            return ret
        if recv is S:
            return I if name in ("numel", "index", "count", "__len__") else O
        if name in ("get", "setdefault", "pop", "__getitem__", "__contains__", "__setitem__") and args:
            value = args[1] if len(args) > 1 else O
            self._cache_key(recv, args[0], value, node, store=name in ("setdefault", "__setitem__"))
            return O
        if recv is O and name in TENSOR_MATH_METHODS_STRICT:
            self.record("op", f"method:Tensor.{name}", node.lineno)
            return T
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
