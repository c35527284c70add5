"""Syntactic findings: constructs that are findings wherever they stand (imports, references, calls, stores, classes).

One walk over the whole module, names resolved through the module's imports; no flow or types are needed here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from fnmatch import fnmatchcase

from .checks import (CALL_RULES, FRAME_ATTRS, LOW_PRECISION_DTYPES, PATCH_ROOTS, PATH_WRITE_METHODS, REF_RULES,
                     SUBCLASS_ATTRS, TENSOR_BASES, Finding)
from .symbols import ModuleTables


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def _root(name: str) -> str:
    return name.split(".", 1)[0]


class Scanner:
    """Findings that a construct triggers wherever it is: imports, references, calls, assignments, classes."""

    def __init__(self, tables: ModuleTables) -> None:
        self.t = tables
        self.findings: list[Finding] = []

    def add(self, check: str, node: ast.AST, message: str) -> None:
        self.findings.append(Finding(check, getattr(node, "lineno", 0), message))

    def scan(self) -> list[Finding]:
        for node in ast.walk(self.t.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._ref(alias.name, node)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                self._ref(node.module, node)
                for alias in node.names:
                    self._ref(f"{node.module}.{alias.name}", node)
            elif isinstance(node, (ast.Name, ast.Attribute)):
                name = self.t.dotted(node)
                if name:
                    self._ref(name, node)
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    if node.attr in FRAME_ATTRS:
                        self.add("harness_introspection", node, f"reads frame attribute .{node.attr}")
                    if node.attr in SUBCLASS_ATTRS:
                        self.add("tensor_subclass", node, f"builds tensor subclasses (.{node.attr})")
            elif isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                self._subscript_load(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for target in targets:
                    self._store(target, node)
            elif isinstance(node, ast.ClassDef):
                self._class(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name in ("__torch_function__", "__torch_dispatch__"):
                    self.add("tensor_subclass", node, f"defines {node.name}")
            elif isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if self.t.dotted(exc) in ("builtins.SystemExit", "builtins.KeyboardInterrupt"):
                    self.add("os_kill_or_exit", node, "raises SystemExit/KeyboardInterrupt")
        return self.findings

    def _ref(self, name: str, node: ast.AST) -> None:
        for patterns, check, message in REF_RULES:
            if _matches(name, patterns):
                self.add(check, node, message.format(name=name))

    def _call(self, node: ast.Call) -> None:
        name = self.t.dotted(node.func)
        if name:
            for patterns, check, message in CALL_RULES:
                if _matches(name, patterns):
                    if check == "dynamic_code" and name in ("builtins.__import__", "importlib.import_module") \
                            and node.args and isinstance(node.args[0], ast.Constant) \
                            and isinstance(node.args[0].value, str):
                        self._ref(node.args[0].value, node)  # a constant module name is just an import
                        continue
                    self.add(check, node, message.format(name=name))
                    break
            if name in ("builtins.open", "io.open", "os.fdopen"):
                mode = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "mode"), None)
                if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                    self.add("file_write_outside", node, f"opens a file for writing (mode {mode.value!r})")
            if name == "builtins.getattr" and len(node.args) > 1:
                self._looked_up(node, node.args[0], node.args[1])
            if name in ("builtins.setattr", "builtins.delattr") and node.args:
                target = self.t.dotted(node.args[0])
                if target and _root(target) in PATCH_ROOTS:
                    attr = node.args[1] if len(node.args) > 1 else None
                    if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                        target = f"{target}.{attr.value}"  # setattr(torch, "allclose", f) patches torch.allclose
                    self._patched(target, node, via=name.rsplit(".", 1)[-1])
            if name == "torch.set_float32_matmul_precision":
                arg = node.args[0] if node.args else None
                if not (isinstance(arg, ast.Constant) and arg.value == "highest"):
                    self.add("precision_downgrade", node, "set_float32_matmul_precision below 'highest'")
            if name.startswith("torch.library.") and self._targets_aten(node):
                self.add("monkeypatch_torch", node, f"overrides an aten op ({name})")
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in ("half", "bfloat16") and not node.args:
                self.add("precision_downgrade", node, f"casts with .{func.attr}()")
            if func.attr == "type" and node.args:
                self._type_call(node, node.args[0])
            if func.attr in PATH_WRITE_METHODS:
                self.add("file_write_outside", node, f"writes a file with .{func.attr}()")
        for value in list(node.args) + [k.value for k in node.keywords]:
            dtype = self.t.dotted(value)
            if dtype and _matches(dtype, LOW_PRECISION_DTYPES):
                self.add("precision_downgrade", node, f"uses the low-precision dtype {dtype}")
                break
        for k in node.keywords:
            if k.arg == "allow_tf32" and isinstance(k.value, ast.Constant) and k.value.value is True:
                self.add("precision_downgrade", node, "allow_tf32=True")
            if k.arg == "input_precision" and isinstance(k.value, ast.Constant) \
                    and isinstance(k.value.value, str) and k.value.value.lower().startswith("tf32"):
                self.add("precision_downgrade", node, f"input_precision={k.value.value!r}")

    def _type_call(self, node: ast.Call, to: ast.AST) -> None:
        """``x.type(to)``: a low-precision tensor type named by a string, or a type no check can read."""
        if isinstance(to, ast.Constant) and isinstance(to.value, str):
            if any(low in to.value for low in ("Half", "BFloat16", "float16", "bfloat16")):
                self.add("precision_downgrade", node, f"converts with .type({to.value!r})")
            return
        target = self.t.dotted(to)
        if target is None:
            self.add("dynamic_attribute", node, "converts with .type(...) to a type computed at run time")

    def _looked_up(self, node: ast.Call, owner: ast.AST, attribute: ast.AST) -> None:
        """``getattr(owner, attribute)`` on torch or triton: a constant name is the attribute itself (its dtype
        checked as any), a computed one is what no check can read."""
        target = self.t.dotted(owner)
        if not target or _root(target) not in ("torch", "triton"):
            return
        if isinstance(attribute, ast.Constant) and isinstance(attribute.value, str):
            full = f"{target}.{attribute.value}"
            self._ref(full, node)
            if _matches(full, LOW_PRECISION_DTYPES):
                self.add("precision_downgrade", node, f"uses the low-precision dtype {full}")
            return
        self.add("dynamic_attribute", node, f"looks up an attribute of {target} by a computed name")

    def _targets_aten(self, node: ast.Call) -> bool:
        for a in list(node.args) + [k.value for k in node.keywords]:
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("aten"):
                return True
        return False

    def _subscript_load(self, node: ast.Subscript) -> None:
        """``torch.__dict__[key]`` or ``vars(torch)[key]``: an attribute by its key."""
        base = node.value
        if isinstance(base, ast.Call) and self.t.dotted(base.func) == "builtins.vars" and base.args:
            owner: ast.AST | None = base.args[0]
        elif isinstance(base, ast.Attribute) and base.attr == "__dict__":
            owner = base.value
        else:
            return
        self._looked_up(node, owner, node.slice)  # type: ignore[arg-type]

    def _store(self, target: ast.AST, stmt: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                self._store(e, stmt)
        elif isinstance(target, ast.Starred):
            self._store(target.value, stmt)
        elif isinstance(target, ast.Attribute):
            full = self.t.dotted(target)
            if full and _root(full) in PATCH_ROOTS:
                self._patched(full, stmt, via="assignment")
        elif isinstance(target, ast.Subscript):
            base = target.value
            if isinstance(base, ast.Call) and self.t.dotted(base.func) == "builtins.vars" and base.args:
                inner = self.t.dotted(base.args[0])
                if inner and _root(inner) in PATCH_ROOTS:
                    self.add("monkeypatch_torch", stmt, f"writes into vars({inner})")
                return
            name = self.t.dotted(base)
            if not name:
                return
            if name.startswith("os.environ"):
                self.add("global_state_change", stmt, "changes os.environ")
            elif name == "builtins" or (name.endswith(".__dict__") and _root(name) in PATCH_ROOTS):
                self.add("monkeypatch_torch", stmt, f"writes into {name}")

    def _patched(self, full: str, node: ast.AST, via: str) -> None:
        if full.startswith("torch.backends."):
            self.add("global_state_change", node, f"sets {full}")
            last = full.rsplit(".", 1)[-1]
            if "tf32" in last or "reduced_precision" in last:
                self.add("precision_downgrade", node, f"sets {full}")
        elif any(full.startswith(p) for p in ("torch._dynamo.config", "torch._inductor.config",
                                              "torch._functorch.config")):
            self.add("global_state_change", node, f"sets {full}")
        elif full.startswith("os.environ"):
            self.add("global_state_change", node, "changes os.environ")
        else:
            self.add("monkeypatch_torch", node, f"patches {full} ({via})")

    def _class(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self.t.dotted(base)
            if name in TENSOR_BASES:
                self.add("tensor_subclass", node, f"class {node.name} inherits {name}")
        for kw in node.keywords:
            if kw.arg == "metaclass" and self.t.dotted(kw.value) in TENSOR_BASES:
                self.add("tensor_subclass", node, f"class {node.name} uses a tensor metaclass")
