"""The package's architecture, checked: every rule runs workflow_scripts.stages.<rule>, every stage module is run by
a rule and takes one validated --params, imports point one way (stages/tools -> libraries -> core) and there is
no import cycle anywhere in the package."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workflow_scripts"
ENTRY_POINTS = {"stages", "tools"}  # what only a person or a rule calls
LIBRARIES = {"core", "suite", "generation", "analysis", "evaluation", "scoring"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """The package modules a file imports, anywhere in it (function-level imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found.update(n for n in names if n in MODULES)
    return found


GRAPH = {name: imports_of(path) - {name} for name, path in MODULES.items()}


def subpackage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else ""


def rules_and_commands() -> dict[str, str]:
    """rule name -> the module its shell command runs (python -m <module>)."""
    found: dict[str, str] = {}
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        text = smk.read_text()
        blocks = re.split(r"\n(?=\s*rule[ :])", text)
        for block in blocks:
            name = re.search(r"^\s*rule (\w+):", block, re.M) or re.search(r'name:\s*\n\s*f"(\w+?)_\{', block)
            command = re.search(r'python -m (workflow_scripts[\w.]*)', block)
            if name and command:
                found[name.group(1)] = command.group(1)
    return found


def test_every_rule_runs_the_stage_named_after_it() -> None:
    rules = rules_and_commands()
    assert {"problems", "prompts", "extract", "static_analysis", "evaluate", "baseline", "collect", "summary",
            "completions_vllm"} <= set(rules), rules
    wrong = {rule: module for rule, module in rules.items() if module != f"workflow_scripts.stages.{rule}"}
    assert not wrong, f"rules whose command is not workflow_scripts.stages.<rule>: {wrong}"


def test_every_stage_module_is_a_rule_with_validated_params() -> None:
    rules = set(rules_and_commands())
    stages = {name.rsplit(".", 1)[1] for name in MODULES if name.startswith("workflow_scripts.stages.")}
    assert stages == rules, f"stage modules without a rule: {stages - rules}; rules without a module: {rules - stages}"
    for stage in sorted(stages):
        module = importlib.import_module(f"workflow_scripts.stages.{stage}")
        assert callable(module.main), stage
        source = MODULES[f"workflow_scripts.stages.{stage}"].read_text()
        # Either its own Params dataclass, or the shared CLI of the stage it is a view of (model_rows, repair_store).
        assert dataclasses.is_dataclass(getattr(module, "Params", None)) or "import run" in source, stage


def test_imports_point_one_way() -> None:
    bad = []
    for module, imported in GRAPH.items():
        source = subpackage(module)
        for target in imported:
            target_pkg = subpackage(target)
            if target_pkg in ENTRY_POINTS and source != target_pkg:
                bad.append(f"{module} imports the entry point {target}")
            if source == "core" and target_pkg not in ("core", ""):
                bad.append(f"core module {module} imports {target}")
            if source in LIBRARIES and target_pkg == "devtools":
                bad.append(f"library module {module} imports the development tool {target}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("workflow_scripts.core")))
def test_core_imports_only_the_standard_library(module: str) -> None:
    """core/ must import in the vLLM environment, which has no pandas or numpy: third-party imports stay lazy."""
    tree = ast.parse(MODULES[module].read_text())
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    third_party = []
    for node in top_level:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for name in names:
            root = name.split(".")[0]
            if root not in ("workflow_scripts", "__future__") and root not in __import__("sys").stdlib_module_names:
                third_party.append(name)
    assert not third_party, f"{module} imports {third_party} at module level"


def _help(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``main(argv)`` prints for --help, which argparse ends with SystemExit(0)."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0, capsys.readouterr().err[-2000:]
    return capsys.readouterr().out


@pytest.mark.parametrize("tool", sorted(p.stem for p in (PACKAGE / "tools").glob("*.py") if p.stem != "__init__"))
def test_every_tool_answers_help_through_the_one_door(tool: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The door's own function (`python -m workflow_scripts` runs it), called here rather than in a process of its
    # own: the same parsers, without 13 interpreters started.
    from workflow_scripts.__main__ import main

    assert "usage: python -m workflow_scripts" in _help(main, [tool.replace("_", "-"), "--help"], capsys)


@pytest.mark.parametrize("stage", sorted(p.stem for p in (PACKAGE / "stages").glob("*.py") if p.stem != "__init__"))
def test_every_stage_answers_help(stage: str, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    module = importlib.import_module(f"workflow_scripts.stages.{stage}")
    assert "--params" in _help(module.main, ["--help"], capsys)
