"""What a call does in the flow walk: a kernel launch (``kernel[grid](...)``), the answer's own functions, methods,
classes and lambdas (walked with the argument types), layers and module methods (kept ops), updates of
``self``-held containers (memoisation findings), and calls into the libraries (library.py).

Mixed into ``Flow`` (flow.py), whose state and function binding (``call_function``) it uses."""

from __future__ import annotations

import ast

from .checks import CACHE_DECORATORS
from .lattice import (I, O, P, S, T, Bound, LambdaTy, Mod, Refs, SelfTy, Seq, Tup, Ty, contains, container_elem,
                      elem_of, join, join_all, refs)
from .vocabulary import MODULE_NONCOMPUTE_METHODS, NN_NO_COMPUTE, NN_NONCALLABLE_CONTAINERS, TENSOR_MATH_METHODS_STRICT


class Calls:
    """Follows calls: launches, the answer's own code, layers, library calls. Mixed into Flow."""

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
