"""Static (AST) analysis of an answer's source: what it defines, whether it keeps PyTorch ops, and hack findings.

Everything here works on the ``ast`` of the answer; the answer is never imported and no regular expression
ever looks at its source. Names are resolved through the answer's own imports (``import torch.nn.functional as
F``, ``from torch import nn``, ``from os import system``, module-level aliases such as ``relu = torch.relu``,
``getattr(torch, "relu")``), so ``F.relu`` and ``torch.nn.functional.relu`` are the same thing. Where the answer
never binds them, the conventional names ``torch``, ``nn``, ``F``, ``triton`` and ``tl`` resolve as usual.

Classifications (the fields of ``StaticReport``)
-----------------------------------------------
- ``parses`` / ``syntax_error``: ``ast.parse`` succeeded / its message with the line.
- ``has_model_new``: a top-level ``class ModelNew`` (or a top-level assignment ``ModelNew = ...``).
- ``defines_triton_kernel``: a function decorated with ``triton.jit`` / ``tl.jit`` / ``triton.autotune`` /
  ``triton.heuristics`` (any stack of them, called or not), or bound by ``name = triton.jit(fn)``.
- ``launches_triton_kernel``: a subscript-call ``kernel[grid](...)`` of such a function (by name, by an attribute
  named like it, or through a variable/dict assigned from it) in Python code, i.e. outside ``@triton.jit`` bodies.
- ``keeps_torch_op`` / ``torch_ops_kept``: the published definition, in ``flow``.
- ``findings``: ``Finding(code, severity, line, message)``; the codes, their severities and triggers in ``checks``.

The package: ``checks`` (the registry of checks and their severities, ``Finding``, rule tables), ``vocabulary``
(torch / nn / Tensor names), ``lattice`` (the types of the flow inference), ``symbols`` (what the module binds),
``flow`` and ``library`` (the walk: keeps_torch_op, try/except events, memoisation), ``scanner`` (syntactic
findings), ``kernels`` (launches, unused kernels); this module runs them in order.

CLI: ``python -m workflow_scripts analyze --code ANSWER.py [--out OUT.json]`` prints ``to_dict()`` as JSON and
writes it to ``--out`` when given.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .checks import CHECKS, FINDING_CODES, Finding, Severity, dedupe
from .flow import Event, Flow, prescan_attributes
from .kernels import launch_nodes, unused_kernels
from .lattice import SelfTy
from .scanner import Scanner
from .symbols import FuncNode, ModuleTables, enclosing_classes, has_model_new, model_new_class

__all__ = ["CHECKS", "FINDING_CODES", "Finding", "Severity", "StaticReport", "analyze_source"]


@dataclass
class StaticReport:
    parses: bool
    syntax_error: str | None = None
    has_model_new: bool = False
    defines_triton_kernel: bool = False
    launches_triton_kernel: bool = False
    keeps_torch_op: bool = False
    torch_ops_kept: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def reject_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings if f.severity == "reject"})

    @property
    def flag_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings if f.severity == "flag"})

    def to_dict(self) -> dict:
        return {
            "parses": self.parses,
            "syntax_error": self.syntax_error,
            "has_model_new": self.has_model_new,
            "defines_triton_kernel": self.defines_triton_kernel,
            "launches_triton_kernel": self.launches_triton_kernel,
            "keeps_torch_op": self.keeps_torch_op,
            "torch_ops_kept": list(self.torch_ops_kept),
            "findings": [f.to_dict() for f in self.findings],
        }


def analyze_source(code: str) -> StaticReport:
    """The static report of an answer's source (see the module docstring for every rule)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return StaticReport(parses=False, syntax_error=f"{e.msg} (line {e.lineno})")
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return StaticReport(parses=False, syntax_error=f"{type(e).__name__}: {e}")

    report = StaticReport(parses=True, has_model_new=has_model_new(tree))
    try:
        _analyze_tree(tree, report)
    except RecursionError:
        # Only absurdly deep code gets here; what was set on the report so far stands.
        report.findings = dedupe([*report.findings, Finding(
            "analysis_incomplete", 0, "the code nests too deeply for a complete analysis")])
    return report


def _analyze_tree(tree: ast.Module, report: StaticReport) -> None:
    tables = ModuleTables(tree)
    report.defines_triton_kernel = bool(tables.kernels)
    report.launches_triton_kernel = bool(launch_nodes(tables))

    findings: list[Finding] = Scanner(tables).scan()
    report.findings = dedupe(findings)
    prescan_attributes(tables)

    flow = Flow(tables, emit=True)
    forward_events: list[Event] = []
    forward_node: FuncNode | None = None
    model_cls = model_new_class(tables)
    try:
        if model_cls is not None:
            found = tables.lookup_method(model_cls, "forward")
            if found is not None:
                forward_node = found[1]
                forward_events = flow.run_root(found[1], found[0], SelfTy(model_cls))
        # Every other function, method and the module body: for the findings inside them (fallbacks, caches).
        owner = enclosing_classes(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in tables.kernel_nodes:
                cls = owner.get(id(node))
                flow.run_root(node, cls, SelfTy(cls) if cls else None)
        flow.run_body(tree.body)
    except RecursionError:
        flow.incomplete = True  # pathological nesting: keep what was found so far

    ops: list[str] = []
    for kind, name, _line in forward_events:
        if kind == "op" and name not in ops:
            ops.append(name)
    report.keeps_torch_op = bool(ops)
    report.torch_ops_kept = ops

    for rid, node in flow.try_nodes.items():
        handler_ops = sorted({n for k, n, _ in flow.region_events.get(("handler", rid), {}) if k == "op"})
        body_events = flow.region_events.get(("body", rid), {})
        if handler_ops:
            findings.append(Finding("try_except_fallback", node.lineno,
                                    "except handler falls back to PyTorch: " + ", ".join(handler_ops[:5])))
        elif any(k in ("op", "launch") for k, _, _ in body_events):
            findings.append(Finding("try_except_around_compute", node.lineno,
                                    "try/except around kernel launches or torch ops"))
    findings.extend(flow.findings)

    for name, node in unused_kernels(tables):
        findings.append(Finding("triton_kernel_unused", getattr(node, "lineno", 0),
                                f"@triton.jit function {name!r} is never used"))
    if flow.incomplete:
        findings.append(Finding("analysis_incomplete", forward_node.lineno if forward_node else 0,
                                "the code nests too deeply for a complete analysis; results are partial"))
    elif forward_node is not None:
        kinds = {k for k, _, _ in forward_events}
        if "alloc" in kinds and "launch" not in kinds and "op" not in kinds:
            findings.append(Finding("empty_output_alloc_without_launch", forward_node.lineno,
                                    "forward allocates tensors but launches no kernel and computes nothing"))

    report.findings = dedupe(findings)
