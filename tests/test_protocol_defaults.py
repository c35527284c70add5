"""Each protocol number has one home: the run configurations' dataclass defaults, and DEVICE_DEFAULTS for the few
that differ by device (workflow_scripts/evaluation/config.py). The workflow schema declares no default of its own for
them; rules/common.smk fills every key a configuration leaves out from there (``fill_protocol_defaults``)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from workflow_scripts.core.configuration import load
from workflow_scripts.evaluation import config as config_module
from workflow_scripts.evaluation.config import (DEVICE_DEFAULTS, BaselineConfig, DeviceDefaults, EvalConfig, filled,
                                                fill_protocol_defaults)


ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
SECTIONS = {"evaluation": EvalConfig, "baselines": BaselineConfig}


def schema_section(name: str) -> dict:
    return yaml.safe_load(SCHEMA.read_text())["properties"][name]["properties"]


def completed(settings: dict) -> dict:
    """A configuration as rules/common.smk completes it: the schema's defaults, then the protocol's."""
    config = {"suite": {"path": "demo/suite"}, "models": {"m": {"kind": "reference"}}, **copy.deepcopy(settings)}
    validate(config, str(SCHEMA))
    fill_protocol_defaults(config, SCHEMA)
    return config


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_the_schema_sets_no_protocol_default(section: str) -> None:
    fields = SECTIONS[section].__dataclass_fields__
    defaulted = sorted(k for k, spec in schema_section(section).items() if k in fields and "default" in spec
                       and k != "gpus")  # gpus: which GPUs a job may lock, not a protocol number
    assert not defaulted, f"schema defaults for {section} keys whose home is evaluation/config.py: {defaulted}"


@pytest.mark.parametrize("device", sorted(DEVICE_DEFAULTS))
def test_left_out_keys_get_the_run_configurations_values_for_the_device(device: str) -> None:
    config = completed({"evaluation": {"device": device}})
    evaluation, baselines = config["evaluation"], config["baselines"]
    defaults = DEVICE_DEFAULTS[device]
    assert (evaluation["timing_trials"], evaluation["warmup"]) == (defaults.timing_trials, defaults.warmup)
    assert evaluation["timeout_s"] == defaults.answer_timeout_s
    assert baselines["timeout_s"] == defaults.baseline_timeout_s
    answer = EvalConfig(device=device)
    for key in schema_section("evaluation"):
        if key in EvalConfig.__dataclass_fields__ and key != "gpus":
            assert evaluation[key] == getattr(answer, key), key
    assert baselines["compile_mode"] == BaselineConfig(device=device).compile_mode
    # What the rules pass on is what the evaluator then uses.
    assert EvalConfig(**{k: v for k, v in evaluation.items() if k in EvalConfig.__dataclass_fields__}) == answer


def test_set_keys_are_kept() -> None:
    config = completed({"evaluation": {"device": "cuda", "timing_trials": 7, "timeout_s": 30},
                        "baselines": {"timeout_s": 60}})
    assert (config["evaluation"]["timing_trials"], config["evaluation"]["warmup"]) == (7, 3)
    assert config["evaluation"]["timeout_s"] == 30 and config["baselines"]["timeout_s"] == 60


def test_a_changed_default_needs_no_other_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The numbers are read from the dataclasses and DEVICE_DEFAULTS, never from a list kept beside them."""
    monkeypatch.setitem(DEVICE_DEFAULTS, "cpu", dataclasses.replace(DEVICE_DEFAULTS["cpu"], timing_trials=12))
    assert completed({})["evaluation"]["timing_trials"] == 12
    assert EvalConfig(device="cpu").timing_protocol().trials == 12

    @dataclasses.dataclass
    class SevenTrials(EvalConfig):
        correctness_trials: int = 7

    assert filled(SevenTrials, {}, schema_section("evaluation"))["correctness_trials"] == 7


def test_every_device_has_its_defaults() -> None:
    assert set(DEVICE_DEFAULTS) == {"cpu", "cuda"}
    assert all(isinstance(d, DeviceDefaults) for d in DEVICE_DEFAULTS.values())
    with pytest.raises(ValueError, match="device"):
        EvalConfig(device="tpu")
    assert config_module.RunConfig.__dataclass_fields__["timing_trials"].default is None  # the device's


def test_the_kernelbench_exact_overlay_is_the_kernelbench_exact_configuration() -> None:
    """config/kernelbench_exact.yaml and EvalConfig.kernelbench_exact() state the same deviations from the default."""
    overlay = load([ROOT / "config/kernelbench_exact.yaml"])["evaluation"]
    exact, default = EvalConfig.kernelbench_exact(device="cuda"), EvalConfig(device="cuda")
    changed = {f.name: getattr(exact, f.name) for f in dataclasses.fields(EvalConfig)
               if getattr(exact, f.name) != getattr(default, f.name)}
    assert overlay == changed
