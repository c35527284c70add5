"""What each stage's store key follows: the subpackages its code reaches through import statements, pinned here per
stage, so a change to what decides a result re-keys exactly the results it can change. A module imported by name at
run time could not be followed, so the key builder refuses it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workflow_scripts.core import store as store_module
from workflow_scripts.core.store import StringImport, code_files, code_version

PACKAGE = Path(store_module.__file__).resolve().parents[1]

# Stage -> the library subpackages its code version covers (each whole; core/ in every one).
COVERED = {
    "problems": {"core", "suite"},
    "fetch_kernelbench": {"core", "suite"},
    "prompts": {"core", "suite"},
    "completions_replay": {"core", "generation"},
    "completions_cli": {"core", "generation"},
    # Not keyed in the store (the completion cache keys its answers); it holds its engine's GPUs through
    # evaluation/gpu_lock.py, as every GPU job does.
    "completions_vllm": {"core", "generation", "evaluation", "analysis", "suite"},
    "extract": {"core", "analysis"},
    "static_analysis": {"core", "analysis"},
    # The evaluator runs the static analyser first (a rejection runs nothing) and loads problems through suite/.
    "evaluate": {"core", "analysis", "suite", "evaluation"},
    "baseline": {"core", "analysis", "suite", "evaluation"},
    "environment": {"core", "analysis", "suite", "evaluation"},
    "device_rates": {"core", "analysis", "suite", "evaluation"},
    "collect": {"core", "scoring"},
    "model_rows": {"core", "scoring"},
    "summary": {"core", "scoring"},
    "gpu_timeline": {"core", "scoring"},
    "model_names": {"core"},
    "verify_store": {"core"},
    "repair_store": {"core"},
}


def covered_subpackages(stage: str) -> set[str]:
    parts = {p.relative_to(PACKAGE).parts for p in code_files(f"workflow_scripts.stages.{stage}")}
    return {part[0] for part in parts if len(part) > 1 and part[0] != "stages"}


@pytest.fixture()
def package_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the package that the key builder reads instead of the real one."""
    copy = tmp_path / "workflow_scripts"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(store_module, "PACKAGE_DIR", copy)
    return copy


def edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n# edited\n")


def test_every_stage_is_pinned() -> None:
    stages = {p.stem for p in (PACKAGE / "stages").glob("*.py") if p.stem != "__init__"}
    assert stages == set(COVERED)


@pytest.mark.parametrize("stage", sorted(COVERED))
def test_each_stage_key_covers_exactly_its_subpackages(stage: str) -> None:
    assert covered_subpackages(stage) == COVERED[stage]


def test_changing_the_static_analyser_changes_the_evaluate_key(package_copy: Path) -> None:
    before = {stage: code_version(f"workflow_scripts.stages.{stage}") for stage in ("evaluate", "static_analysis")}
    edit(package_copy / "analysis" / "static" / "__init__.py")  # the module that defines analyze_source
    for stage, key in before.items():
        assert code_version(f"workflow_scripts.stages.{stage}") != key, stage


def test_changing_the_timing_module_leaves_the_prompts_key(package_copy: Path) -> None:
    prompts = code_version("workflow_scripts.stages.prompts")
    problems = code_version("workflow_scripts.stages.problems")
    evaluate = code_version("workflow_scripts.stages.evaluate")
    edit(package_copy / "evaluation" / "timing.py")
    assert code_version("workflow_scripts.stages.prompts") == prompts
    assert code_version("workflow_scripts.stages.problems") == problems
    assert code_version("workflow_scripts.stages.evaluate") != evaluate


@pytest.mark.parametrize("call", [
    'importlib.import_module("workflow_scripts.analysis.static")',
    'importlib.import_module(f"workflow_scripts.{name}")',
    "importlib.import_module(name)",
    '__import__("workflow_scripts.scoring.metrics")',
    'import_module("workflow_scripts.suite.prompt")',
])
def test_an_import_by_name_is_refused(package_copy: Path, call: str) -> None:
    helper = package_copy / "evaluation" / "timing.py"
    helper.write_text(helper.read_text() + f"\n\ndef _late(name):\n    import importlib\n    return {call}\n")
    with pytest.raises(StringImport, match=r"timing\.py:\d+: .*cannot follow"):
        code_version("workflow_scripts.stages.evaluate")


def test_an_import_by_name_of_another_library_passes(package_copy: Path) -> None:
    helper = package_copy / "evaluation" / "timing.py"
    helper.write_text(helper.read_text() + '\n\ndef _late():\n    import importlib\n    return importlib.import_module("json")\n')
    assert code_version("workflow_scripts.stages.evaluate")
