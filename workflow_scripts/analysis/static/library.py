"""What calls into the libraries return: builtins, torch (functions, nn classes, Tensor methods), triton, math and
operator. Mixed into ``Flow``: the same walk records the torch ops, allocations and memoisation findings here."""

from __future__ import annotations

import ast

from .lattice import I, O, P, S, T, LambdaTy, Mod, Refs, Seq, Tup, Ty, contains, elem_of, join_all
from .vocabulary import (NN_TENSOR_CLASSES, TENSOR_ALLOC_METHODS, TENSOR_INT_METHODS, TENSOR_LAYOUT_METHODS,
                         TENSOR_OTHER_METHODS, TORCH_ALLOC_FUNCS, TORCH_INT_FUNCS, TORCH_LAYOUT_FUNCS,
                         TORCH_NONOP_PREFIXES, TORCH_OPS_NAMESPACES, TORCH_OTHER_FUNCS, TORCH_SHAPE_FUNCS)


class LibraryCalls:
    """Calls to names outside the answer, by their canonical dotted name (``torch.relu``, ``builtins.len``)."""

    # Provided by Flow (the walk's state lives there).
    def record(self, kind: str, name: str, line: int) -> None:
        raise NotImplementedError

    def finding(self, check: str, node: ast.AST, message: str) -> None:
        raise NotImplementedError

    def attr_of(self, base: Ty, attr: str) -> Ty:
        raise NotImplementedError

    def super_type(self) -> Ty:
        raise NotImplementedError

    def tensor_method(self, name: str, args: list[Ty], node: ast.Call) -> Ty:
        if name in ("size", "stride"):
            return I if args else S
        if name in TENSOR_INT_METHODS:
            return I
        if name == "data_ptr":
            return P
        if name in TENSOR_OTHER_METHODS:
            return O
        if name in TENSOR_LAYOUT_METHODS:
            if name in TENSOR_ALLOC_METHODS:
                self.record("alloc", f"Tensor.{name}", node.lineno)
            return T
        self.record("op", f"method:Tensor.{name}", node.lineno)
        return T

    def call_value(self, callee: Ty, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        raise NotImplementedError

    def call_module(self, mod: Mod, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        raise NotImplementedError

    # -- callables passed as values ---------------------------------------------------------------------------
    def escaping_callables(self, values: list[Ty], node: ast.Call, depth: int = 0,
                           called_with: list[Ty] | None = None) -> None:
        """Callables handed to a call the walk does not follow (``map(torch.relu, xs)``, ``functools.reduce(
        torch.add, xs)``, ``sorted(xs, key=...)``, a library function): they may be called on tensors there. A torch
        function among them counts as the op it is; a layer, a lambda or the answer's own function is walked as if
        called with ``called_with`` (default: tensors)."""
        with_args = called_with if called_with is not None else [T, T]
        for v in values:
            if isinstance(v, Refs):
                for r in sorted(v.names):
                    if ":" not in r:
                        label = torch_value_op(r)
                        if label is not None:
                            self.record("op", label, node.lineno)
                    elif not r.startswith("kernel:"):
                        self.call_value(Refs(frozenset({r})), with_args, {}, node)
            elif isinstance(v, Mod):
                self.call_module(v, with_args[:1], {}, node)
            elif isinstance(v, LambdaTy):
                self.call_value(v, with_args, {}, node)
            elif isinstance(v, (Tup, Seq)) and depth < 2:
                self.escaping_callables(list(v.elts) if isinstance(v, Tup) else [v.elem], node, depth + 1,
                                        called_with)

    def call_external(self, d: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if calls_its_arguments(d):
            # map(f, xs, ys) calls f(x, y); filter, sorted, min and max call theirs on the items of their iterable.
            items = None
            if d in ("builtins.map", "builtins.filter") and args:
                items = [elem_of(a) for a in args[1:]]
            elif d in ("builtins.sorted", "builtins.min", "builtins.max") and args:
                items = [elem_of(args[0]) if len(args) == 1 else join_all(args)]
            self.escaping_callables(list(args) + list(kwargs.values()), node, called_with=items)
        if d in ("importlib.import_module", "builtins.__import__") and node.args:
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                return Refs(frozenset({name.value if d == "importlib.import_module" else name.value.split(".")[0]}))
        if d.startswith("builtins."):
            return self.call_builtin(d[len("builtins."):], args, kwargs, node)
        if d.startswith("torch."):
            return self.call_torch(d, args, kwargs, node)
        if d.startswith("triton."):
            if d in ("triton.cdiv", "triton.next_power_of_2", "triton.language.cdiv"):
                return I
            return O
        if d.startswith("math."):
            return I
        if d == "functools.partial" and args:
            return args[0] if isinstance(args[0], (Refs, LambdaTy, Mod)) else O
        if d.startswith("operator.") and any(a is T for a in args):
            self.record("op", f"operator:{d[len('operator.'):]}", node.lineno)
            return T
        return O

    def call_torch(self, d: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if d.startswith("torch.nn.functional."):
            self.record("op", f"functional:{d}", node.lineno)
            return T
        if d.startswith("torch.Tensor."):
            return self.tensor_method(d.rsplit(".", 1)[1], args[1:], node)
        if d.startswith("torch.nn.") and not d.startswith(TORCH_NONOP_PREFIXES):
            tail = d[len("torch.nn."):]
            if "." not in tail and tail[:1].isupper():
                if tail in NN_TENSOR_CLASSES:
                    return T
                if tail in ("ParameterList", "ParameterDict"):
                    return Seq(T)
                elems = set()
                for a in args:
                    for cand in (a, elem_of(a) if isinstance(a, Seq) else O):
                        if isinstance(cand, Mod):
                            elems.add(cand)
                return Mod(frozenset({d}), frozenset(elems))
            return O
        name = d[len("torch."):]
        if name.startswith("ops."):
            namespace = name.split(".")[1] if name.count(".") >= 1 else ""
            if namespace not in TORCH_OPS_NAMESPACES:
                return T
        if name in TORCH_INT_FUNCS:
            return I
        if name in TORCH_SHAPE_FUNCS:
            return S
        if name in TORCH_ALLOC_FUNCS:
            self.record("alloc", d, node.lineno)
            return T
        if name in TORCH_LAYOUT_FUNCS:
            return T
        if name in TORCH_OTHER_FUNCS or d.startswith(TORCH_NONOP_PREFIXES) or name.startswith(("set_", "get_")):
            return O
        if name[:1].isupper():
            return O  # classes (torch.Tensor, torch.Generator ...)
        self.record("op", f"torch:{d}", node.lineno)
        return T

    def call_builtin(self, name: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if name in ("id", "hash"):
            return P
        if name in ("int", "float", "bool", "len", "round", "ord", "divmod"):
            return I
        if name in ("abs", "pow"):
            if any(a is T for a in args):
                self.record("op", f"operator:{name}", node.lineno)
                return T
            return I
        if name in ("min", "max", "sum"):
            if any(contains(a, T) for a in args):
                self.record("op", f"builtin:{name}", node.lineno)
                return T
            return I
        if name in ("tuple", "list"):
            if not args:
                return Seq(O)
            a = args[0]
            if a is S or isinstance(a, Tup):
                return a
            return Seq(elem_of(a))
        if name == "range":
            return Seq(I)
        if name == "enumerate":
            return Seq(Tup((I, elem_of(args[0]) if args else O)))
        if name == "zip":
            return Seq(Tup(tuple(elem_of(a) for a in args)))
        if name in ("reversed", "sorted", "iter", "filter"):
            return Seq(elem_of(args[-1])) if args else O
        if name == "next":
            return elem_of(args[0]) if args else O
        if name == "getattr" and len(node.args) >= 2:
            key = node.args[1]
            if contains(args[1], P):
                self.finding("output_memoization", node, "getattr with a data_ptr()/id() name")
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return self.attr_of(args[0], key.value)
            # A computed name: on torch (or a tensor) it names some op, which calling it keeps.
            if isinstance(args[0], Refs) and any(r == "torch" or r.startswith("torch.") for r in args[0].names):
                return Refs(frozenset({f"{r}.<computed>" for r in args[0].names if ":" not in r}))
            if args[0] is T:
                return self.attr_of(T, "<computed>")
            return O
        if name in ("setattr", "hasattr", "delattr") and len(args) >= 2 and contains(args[1], P):
            self.finding("output_memoization", node, f"{name} with a data_ptr()/id() name")
            return O
        if name == "super":
            return self.super_type()
        return O


# Builtins and torch functions that call the functions they are given (a torch function passed to one is an op).
_CALLING_BUILTINS = frozenset({"map", "filter", "sorted", "min", "max"})
_CALLING_TORCH = ("torch.vmap", "torch.func.", "torch.compile", "torch.utils.checkpoint.", "torch.cond",
                  "torch.while_loop", "torch.jit.script", "torch.jit.trace")
# Names under torch that are values, never ops: dtypes.
_TORCH_DTYPES = frozenset({
    "float", "double", "half", "bfloat16", "float16", "float32", "float64", "complex32", "complex64", "complex128",
    "cfloat", "cdouble", "chalf", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "short",
    "int", "long", "bool", "quint8", "qint8", "qint32", "quint4x2", "quint2x4", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
})


def calls_its_arguments(d: str) -> bool:
    """Whether the external callable ``d`` may call the functions it is handed: the builtins and torch functions
    that do, and any other library's function (functools.reduce, itertools.starmap ...); not Triton's (a launch's
    arguments are data), not math's, not the builtins that only inspect or hold values."""
    if d.startswith("builtins."):
        return d[len("builtins."):] in _CALLING_BUILTINS
    if d.startswith("torch."):
        return d.startswith(_CALLING_TORCH)
    return not d.startswith(("triton.", "math.", "operator."))


def torch_value_op(d: str) -> str | None:
    """The op a torch function ``d`` (a dotted name) counts as when it is called, or None for what computes
    nothing (allocation, layout, meta, classes, the non-op namespaces): ``LibraryCalls.call_torch``'s rule, without
    calling."""
    if d.startswith("torch.nn.functional."):
        return f"functional:{d}"
    if d.startswith("torch.Tensor."):
        m = d.rsplit(".", 1)[1]
        if m in ("size", "stride", "data_ptr") or m in TENSOR_INT_METHODS or m in TENSOR_OTHER_METHODS \
                or m in TENSOR_LAYOUT_METHODS:
            return None
        return f"method:Tensor.{m}"
    if d.startswith("torch.nn.") or not d.startswith("torch."):
        return None  # layers are classes (their instances count when called); not torch
    name = d[len("torch."):]
    if name in _TORCH_DTYPES:
        return None
    if name.startswith("ops."):
        namespace = name.split(".")[1] if name.count(".") >= 1 else ""
        return None if namespace not in TORCH_OPS_NAMESPACES else f"torch:{d}"
    if (name in TORCH_INT_FUNCS or name in TORCH_SHAPE_FUNCS or name in TORCH_ALLOC_FUNCS or name in TORCH_LAYOUT_FUNCS
            or name in TORCH_OTHER_FUNCS or d.startswith(TORCH_NONOP_PREFIXES) or name.startswith(("set_", "get_"))
            or name[:1].isupper() or "." in name and name.split(".")[0] in ("cuda", "backends", "jit", "_dynamo")):
        return None
    return f"torch:{d}"
