"""The types of expressions in the flow walk (the lattice of lattice.py): names, attributes, subscripts, operators
(arithmetic or a comparison on a tensor is a kept op), containers, f-strings, comprehensions and lambdas. A call is
calls.py's.

Mixed into ``Flow`` (flow.py), whose state (the frame, the module tables, the lambdas seen) it uses."""

from __future__ import annotations

import ast
import builtins

from .lattice import (I, O, P, S, T, Bound, LambdaTy, Mod, Refs, SelfTy, Seq, Tup, Ty, clip, contains, container_elem,
                      elem_of, join, join_all, refs)
from .vocabulary import TENSOR_TENSOR_ATTRS

# How the findings and torch_ops_kept name an operator (``operator:+``).
OPERATOR_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.MatMult: "@", ast.Div: "/", ast.FloorDiv: "//",
                    ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|",
                    ast.BitXor: "^", ast.BitAnd: "&"}
COMPARISON_SYMBOLS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


class Expressions:
    """Types expressions (calls excepted). Mixed into Flow."""

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
            self.record("op", f"operator:{OPERATOR_SYMBOLS.get(type(node.op), '?')}", node.lineno)
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
            elif (left is T or right is T) and type(op) in COMPARISON_SYMBOLS and not counted:
                self.record("op", f"operator:{COMPARISON_SYMBOLS[type(op)]}", node.lineno)
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
