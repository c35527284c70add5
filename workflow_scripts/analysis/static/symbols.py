"""What the answer binds at module level (imports, functions, kernels, classes, constants) and where ModelNew is."""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Union

from .lattice import I, Ty
from .vocabulary import DEFAULT_ALIASES, KERNEL_DECORATORS

FuncNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]


@dataclass
class ClassInfo:
    name: str
    node: ast.ClassDef
    local_bases: list[str] = field(default_factory=list)
    external_bases: list[str] = field(default_factory=list)
    methods: dict[str, FuncNode] = field(default_factory=dict)
    kernels: set[str] = field(default_factory=set)
    attrs: dict[str, Ty] = field(default_factory=dict)
    is_module: bool = False
    is_autograd_fn: bool = False


class ModuleTables:
    """What the answer binds at module level: imports, functions, kernels, classes, constants."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.imports: dict[str, str] = {}
        self.functions: dict[str, FuncNode] = {}
        self.kernels: dict[str, ast.AST] = {}
        self.kernel_nodes: set[int] = set()
        self.classes: dict[str, ClassInfo] = {}
        self.constants: dict[str, Ty] = {}
        self.class_aliases: dict[str, str] = {}
        self.local_refs: dict[str, str] = {}  # name = Fn.apply / name = helper: refs to the answer's own code
        self.module_env: dict[str, Ty] = {}  # types of module-level names after the module body ran
        self.bound_names: set[str] = set()
        self._collect_bound_names()
        self._collect_imports()
        for name, dotted in DEFAULT_ALIASES.items():
            if name not in self.bound_names or name == "__builtins__":
                self.imports.setdefault(name, dotted)
        self._collect_definitions()

    # -- names --
    def _collect_bound_names(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bound_names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound_names.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound_names.add(node.arg)
            elif isinstance(node, ast.alias):
                self.bound_names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.bound_names.add(node.name)

    def _collect_imports(self) -> None:
        # All imports, at any depth (a local import inside forward counts too; last binding wins).
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(self, node: ast.AST) -> str | None:
        """The canonical dotted name an expression refers to, through imports; None when it is not one."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):  # iterative: attribute chains can be thousands long
            parts.append(node.attr)
            node = node.value
        base: str | None = None
        if isinstance(node, ast.Name):
            if node.id in self.imports:
                base = self.imports[node.id]
            elif node.id not in self.bound_names and hasattr(builtins, node.id):
                base = f"builtins.{node.id}"
        elif (isinstance(node, ast.Call) and len(node.args) >= 2 and not node.keywords
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and isinstance(node.func, ast.Name) and self.dotted(node.func) == "builtins.getattr"):
            inner = self.dotted(node.args[0])
            base = f"{inner}.{node.args[1].value}" if inner else None
        if base is None:
            return None
        return ".".join([base, *reversed(parts)])

    def is_kernel_decorator(self, dec: ast.AST) -> bool:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = self.dotted(target)
        return bool(name) and name.startswith("triton.") and name.rsplit(".", 1)[-1] in KERNEL_DECORATORS

    def is_kernel(self, fn: ast.AST) -> bool:
        return isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            self.is_kernel_decorator(d) for d in fn.decorator_list
        )

    # -- definitions --
    def _collect_definitions(self) -> None:
        for node in ast.walk(self.tree):
            if self.is_kernel(node):
                self.kernels[node.name] = node
                self.kernel_nodes.add(id(node))
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(stmt) not in self.kernel_nodes:
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = self._class_info(stmt)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                self._module_assign(stmt.targets[0].id, stmt.value)
        # Module / autograd-function status propagates through local bases.
        changed = True
        while changed:
            changed = False
            for info in self.classes.values():
                for base in info.local_bases:
                    b = self.classes.get(base)
                    if b and b.is_module and not info.is_module:
                        info.is_module = changed = True
                    if b and b.is_autograd_fn and not info.is_autograd_fn:
                        info.is_autograd_fn = changed = True

    def _module_assign(self, name: str, value: ast.AST) -> None:
        # kernel = triton.jit(fn)
        if isinstance(value, ast.Call) and self.is_kernel_decorator(value.func):
            self.kernels[name] = value
            return
        if isinstance(value, ast.Name) and value.id in self.classes:
            self.class_aliases[name] = value.id
            return
        if isinstance(value, ast.Name) and value.id in self.kernels:
            self.kernels[name] = self.kernels[value.id]
            return
        if isinstance(value, ast.Name) and value.id in self.functions:
            self.local_refs[name] = f"func:{value.id}"
            return
        if (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                and value.value.id in self.classes):
            self.local_refs[name] = f"class:{value.value.id}.{value.attr}"
            return
        dotted = self.dotted(value)
        if dotted and not dotted.startswith("builtins."):
            self.imports[name] = dotted  # relu = torch.relu: an alias
            return
        if isinstance(value, ast.Constant) and isinstance(value.value, (int, float, bool, complex)):
            self.constants[name] = I
        elif isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant):
            self.constants[name] = I
        elif isinstance(value, ast.BinOp) and all(isinstance(v, ast.Constant) for v in (value.left, value.right)):
            self.constants[name] = I

    def _class_info(self, node: ast.ClassDef) -> ClassInfo:
        info = ClassInfo(node.name, node)
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in self.classes:
                info.local_bases.append(base.id)
                continue
            dotted = self.dotted(base)
            if dotted:
                info.external_bases.append(dotted)
                if dotted.startswith("torch.nn.") and dotted.rsplit(".", 1)[-1][:1].isupper():
                    info.is_module = True
                if dotted in ("torch.autograd.Function", "torch.autograd.function.Function"):
                    info.is_autograd_fn = True
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if id(stmt) in self.kernel_nodes:
                    info.kernels.add(stmt.name)
                else:
                    info.methods[stmt.name] = stmt
        return info

    def mro(self, cls: str) -> list[str]:
        out: list[str] = []

        def visit(c: str) -> None:
            if c in out or c not in self.classes:
                return
            out.append(c)
            for b in self.classes[c].local_bases:
                visit(b)

        visit(cls)
        return out

    def lookup_method(self, cls: str, name: str, after: str | None = None) -> tuple[str, FuncNode] | None:
        order = self.mro(cls)
        if after is not None and after in order:
            order = order[order.index(after) + 1 :]
        for c in order:
            if name in self.classes[c].methods:
                return c, self.classes[c].methods[name]
        return None

    def lookup_attr(self, cls: str) -> dict[str, Ty]:
        merged: dict[str, Ty] = {}
        for c in reversed(self.mro(cls)):
            merged.update(self.classes[c].attrs)
        return merged

    def class_kernels(self, cls: str) -> set[str]:
        return set().union(*(self.classes[c].kernels for c in self.mro(cls))) if cls in self.classes else set()


def model_new_class(tables: ModuleTables) -> str | None:
    if "ModelNew" in tables.classes:
        return "ModelNew"
    return tables.class_aliases.get("ModelNew")


def has_model_new(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "ModelNew":
            return True
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in targets):
                return True
    return False


def enclosing_classes(tree: ast.Module) -> dict[int, str]:
    """id() of every method -> the name of its class."""
    owner: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    owner[id(stmt)] = node.name
    return owner
