"""The registry of flags (core/statuses.py) is complete: every flag the evaluator can raise is declared there, once,
with whether it rejects the answer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from workflow_scripts.core.statuses import FLAGS, Status, flag_entry, is_integrity_flag
from workflow_scripts.scoring.metrics import SUSPICIOUS_SPEEDUP_FLAG

PACKAGE = Path(__file__).resolve().parents[1] / "workflow_scripts"
# Calls that raise a flag: self.flag("x"), flag(f"x:{detail}"), guard._violation("x", ...), ...
EMITTERS = {"flag", "_flag", "_violation", "add_flag"}


def _flag_name(node: ast.expr) -> str | None:
    """The registry name of a flag literal: "x" or f"x:{...}" -> "x"; None for a computed value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":", 1)[0]
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        head = str(node.values[0].value)
        return head.split(":", 1)[0] if ":" in head else None
    return None


def emitted_flags() -> dict[str, list[str]]:
    """Every literal flag passed to an emitter anywhere under evaluation/ and scoring/, with where it is raised."""
    found: dict[str, list[str]] = {}
    for path in sorted([*PACKAGE.joinpath("evaluation").rglob("*.py"), *PACKAGE.joinpath("scoring").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in EMITTERS and (flag := _flag_name(node.args[0])) is not None:
                found.setdefault(flag, []).append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_every_emitted_flag_is_registered() -> None:
    emitted = emitted_flags()
    assert len(emitted) >= 15, f"the scan found too few emit sites to be looking at the right code: {emitted}"
    unregistered = {flag: where for flag, where in emitted.items() if flag not in FLAGS}
    assert not unregistered, f"flags raised but not declared in core/statuses.py FLAGS: {unregistered}"
    assert SUSPICIOUS_SPEEDUP_FLAG in FLAGS and not FLAGS[SUSPICIOUS_SPEEDUP_FLAG].rejects


def test_registry_entries_are_consistent() -> None:
    for name, flag in FLAGS.items():
        assert flag.name == name and ":" not in name and flag.description
    assert is_integrity_flag("harness_tampered:timing.time_ms") and flag_entry("static:keeps_torch_op").name == "static"
    assert not is_integrity_flag("never_declared") and flag_entry("never_declared") is None


@pytest.mark.parametrize("flag", sorted(name for name, f in FLAGS.items() if f.rejects))
def test_rejecting_flags_give_rejected_runtime(flag: str) -> None:
    from workflow_scripts.evaluation.protocol import decide_status

    status = decide_status(imported=True, pre_import_status=None, failure=None, trial_verdicts=["ok"],
                           flags=[f"{flag}:detail"], require_triton=False, all_calls_launched=True)
    assert status is Status.REJECTED_RUNTIME
