"""The one registry of model kinds (workflow_scripts/generation/kinds.py): the configuration schema has exactly its
kinds, every kind routes to a rule that exists and runs its stage, and nothing else reads `kind` by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from workflow_scripts.core import configuration
from workflow_scripts.generation.kinds import KINDS, kind_of, models_for_rule
from workflow_scripts.generation.vllm import engine_groups

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "schemas" / "config.schema.yaml").read_text())
RULES_TEXT = "\n".join(p.read_text() for p in sorted((ROOT / "rules").glob("*.smk")))


def schema_kinds() -> list[str]:
    """The kinds the schema accepts: the $defs its model entries are oneOf, each with its `kind` const."""
    branches = SCHEMA["properties"]["models"]["additionalProperties"]["oneOf"]
    kinds = []
    for branch in branches:
        name = branch["$ref"].removeprefix("#/$defs/")
        definition = SCHEMA["$defs"][name]
        assert definition["properties"]["kind"] == {"const": name}, name
        assert definition["additionalProperties"] is False and "kind" in definition["required"], name
        kinds.append(name)
    return kinds


def test_the_schema_has_one_definition_per_kind_of_the_registry() -> None:
    assert schema_kinds() == list(KINDS)


def test_every_kind_routes_to_a_rule_that_exists_and_runs_its_stage() -> None:
    for kind in KINDS.values():
        if kind.per_base_model:  # rules completions_vllm_<n>, one per base model
            assert re.search(rf'name:\s*\n\s*f"{kind.rule}_\{{', RULES_TEXT), kind
        else:
            assert re.search(rf"^rule {kind.rule}:", RULES_TEXT, re.M), kind
            # It serves exactly the models the registry routes to it.
            assert f'model=model_regex("{kind.rule}")' in RULES_TEXT, kind
        assert f"python -m workflow_scripts.stages.{kind.rule} " in RULES_TEXT, kind
        assert (ROOT / "workflow_scripts" / "stages" / f"{kind.rule}.py").is_file(), kind


@pytest.mark.parametrize("files", [["config.yaml"], ["config/study.yaml"], ["config/h200.yaml"], ["config/dag_bench.yaml"]])
def test_every_configured_model_is_served_by_one_rule(files: list[str]) -> None:
    models = configuration.load([ROOT / name for name in files])["models"]
    rules = {kind.rule for kind in KINDS.values()}
    served = [name for rule in sorted(rules) for name in models_for_rule(models, rule)]
    assert sorted(served) == sorted(models)
    grouped = [name for names in engine_groups(models).values() for name in names]
    assert grouped == models_for_rule(models, "completions_vllm")
    exempt = {name for name, entry in models.items() if not kind_of(entry).require_triton}
    assert exempt == {name for name, entry in models.items() if entry["kind"] == "reference"}


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(ValueError, match="model kind 'magic' is not one of cached, reference, vllm, cli"):
        kind_of({"kind": "magic"})


# What reading `kind` by name looks like: comparing an entry's kind with a literal, or a kind-named helper.
KIND_BY_NAME = re.compile(r"""\[["']kind["']\]\s*(==|!=|in\b)"""  # entry["kind"] == "cached"
                          r"""|get\(["']kind["']\)\s*(==|!=|in\b)"""  # entry.get("kind") == "vllm"
                          r"""|\bkind\s*(==|!=|in)\s*\(?["'](cached|reference|vllm|cli)["']"""  # kind in ("vllm", ...
                          r"""|models_of_kind\(|model_regex\(["'](cached|reference|vllm|cli)["']""")


def test_no_reader_outside_the_registry_interprets_kind_by_name() -> None:
    readers = sorted((ROOT / "rules").glob("*.smk")) + [ROOT / "Snakefile"]
    readers += [p for p in sorted((ROOT / "workflow_scripts").rglob("*.py")) if p.name != "kinds.py"]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in readers
             for number, line in enumerate(path.read_text().splitlines(), 1) if KIND_BY_NAME.search(line)]
    assert not found, "read the kind through workflow_scripts/generation/kinds.py:\n" + "\n".join(found)
