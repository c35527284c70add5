"""What calls into the libraries return: builtins, torch (functions, nn classes, Tensor methods), triton, math and
operator. Mixed into ``Flow``: the same walk records the torch ops, allocations and memoisation findings here."""

from __future__ import annotations

import ast

from .lattice import I, O, P, S, T, LambdaTy, Mod, Refs, Seq, Tup, Ty, contains, elem_of
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

    def call_external(self, d: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
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
            return O
        if name in ("setattr", "hasattr", "delattr") and len(args) >= 2 and contains(args[1], P):
            self.finding("output_memoization", node, f"{name} with a data_ptr()/id() name")
            return O
        if name == "super":
            return self.super_type()
        return O
