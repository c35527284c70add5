"""How the flow walk executes statements: blocks, both branches of an ``if`` (and every ``match`` case) merged,
loops walked twice so that loop-carried types settle, ``try`` bodies and handlers as regions (what the try/except
findings read), and assignments with the memoisation findings a store can raise (a data_ptr()/id() value kept in a
global or an attribute, a cache keyed on a pointer or a shape).

Mixed into ``Flow`` (flow.py), whose state (the frame, the module tables, the regions) and expression typing
(expressions.py) it uses."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from .expressions import OPERATOR_SYMBOLS
from .lattice import I, O, P, S, T, Mod, SelfTy, Seq, Tup, Ty, contains, elem_of, join, refs


class Statements:
    """Executes statements: the walk's control flow and assignments. Mixed into Flow."""

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
                self.record("op", f"operator:{OPERATOR_SYMBOLS.get(type(s.op), '?')}=", s.lineno)
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
