"""Kernels: which calls launch a ``@triton.jit`` function (``kernel[grid](...)``) and which kernels go unused."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .symbols import ModuleTables

_ALIAS_VALUE_NODES = (ast.Name, ast.Attribute, ast.IfExp, ast.Dict, ast.List, ast.Tuple, ast.Subscript, ast.BoolOp)


def _kernel_aliases(tables: ModuleTables) -> set[str]:
    """Kernel names plus names/attributes assigned from expressions that mention a kernel (k = a if c else b)."""
    names = set(tables.kernels)
    for _ in range(3):
        before = len(names)
        for node in ast.walk(tables.tree):
            # Only plain references (k = a if c else b, {"relu": relu_kernel}), never call results.
            if isinstance(node, ast.Assign) and isinstance(node.value, _ALIAS_VALUE_NODES):
                mentioned = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                if mentioned & names:
                    for target in node.targets:
                        for t in ast.walk(target):
                            if isinstance(t, ast.Name):
                                names.add(t.id)
                            elif isinstance(t, ast.Attribute):
                                names.add(t.attr)
        if len(names) == before:
            break
    return names


def _chain_names(node: ast.AST) -> Iterator[str]:
    while True:
        if isinstance(node, ast.Name):
            yield node.id
            return
        if isinstance(node, ast.Attribute):
            yield node.attr
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return


def launch_nodes(tables: ModuleTables) -> list[ast.Call]:
    aliases = _kernel_aliases(tables)
    inside_kernel: set[int] = set()
    for kid in tables.kernels.values():
        if isinstance(kid, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside_kernel.update(id(n) for n in ast.walk(kid))
    launches = []
    for node in ast.walk(tables.tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and id(node) not in inside_kernel
                and any(n in aliases for n in _chain_names(node.func.value))):
            launches.append(node)
    return launches


def unused_kernels(tables: ModuleTables) -> list[tuple[str, ast.AST]]:
    used: set[str] = set()
    for node in ast.walk(tables.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            used.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.add(node.value)  # getattr(module, "kernel")
    # One definition may have several names (k = triton.jit(f); K = k): it is used when any of them is.
    names_of: dict[int, list[str]] = {}
    for name, node in tables.kernels.items():
        names_of.setdefault(id(node), []).append(name)
    return [(names[0], tables.kernels[names[0]]) for names in names_of.values() if not set(names) & used]
