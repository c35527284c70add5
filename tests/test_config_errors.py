"""Configuration errors fail loudly and precisely: one short message naming the file, the line and the key, from the
functions rules/common.smk calls (unit tests) and from the Snakemake CLI in a subprocess (end to end), including on
a workflow whose results already exist (where Snakemake would swallow an input function's error)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from cli import SmallRun, snakemake, study_on_disk

from workflow_scripts.core.configuration import ConfigError, check_yaml_syntax, schema_error
from workflow_scripts.devtools.workspace import copy_workflow
from workflow_scripts.generation.replay import cached_folder_problems, unfenced_answers

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
DEMO_CONFIG = (ROOT / "config.yaml").read_text()


def line_of(text: str, fragment: str) -> int:
    """The 1-based line of the first line of ``text`` that contains ``fragment``."""
    return next(number for number, line in enumerate(text.splitlines(), 1) if fragment in line)


def error_lines(done) -> list[str]:
    """Snakemake's output without its banner line about the profile."""
    return [line for line in (done.stdout + done.stderr).splitlines()
            if line.strip() and not line.startswith("Using workflow specific profile")]


# -- unit: the functions rules/common.smk calls ----------------------------------------------------------------------


def test_yaml_syntax_error_names_the_file_line_and_where_the_construct_began(tmp_path: Path) -> None:
    broken = DEMO_CONFIG.replace("levels: [1, 2]", "levels: [1, 2", 1)
    (tmp_path / "config.yaml").write_text(broken)
    with pytest.raises(ConfigError) as error:
        check_yaml_syntax(tmp_path / "config.yaml")
    message = str(error.value)
    assert re.search(r"config\.yaml, line \d+, column \d+: YAML syntax error: expected ',' or '\]'", message)
    assert f"began at line {line_of(broken, 'levels: [1, 2')}, column" in message
    (tmp_path / "tab.yaml").write_text("suite:\n\tpath: x\n")
    with pytest.raises(ConfigError, match=r"tab\.yaml, line 2, column 1: YAML syntax error: found character '\\t'"):
        check_yaml_syntax(tmp_path / "tab.yaml")
    check_yaml_syntax(ROOT / "config.yaml")  # the shipped configurations are sound
    check_yaml_syntax(ROOT / "config" / "study.yaml")


def test_a_key_written_twice_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    # YAML keeps the last of two equal keys silently: the first "expert" model would vanish from the study.
    doubled = DEMO_CONFIG.replace("  twin:\n", "  expert:\n    kind: reference\n  twin:\n", 1)
    (tmp_path / "doubled.yaml").write_text(doubled)
    first, second = (n for n, line in enumerate(doubled.splitlines(), 1) if line == "  expert:")
    with pytest.raises(ConfigError, match=rf"doubled\.yaml, line {second}: key 'expert' is written twice in one "
                                          rf"mapping \(first at line {first}\)"):
        check_yaml_syntax(tmp_path / "doubled.yaml")


@pytest.mark.parametrize(
    ("old", "new", "fragment", "expected"),
    [
        ("timeout_s: 30 ", "timeout_s: soon ", "timeout_s: soon", "evaluation.timeout_s: expected number, got 'soon'"),
        ("kind: reference", "kind: magic", "kind: magic",
         "models.calibration.kind: expected one of cached, reference, vllm, cli; got 'magic'"),
        ("    label: \"Expert (pure Triton, fused)\"", "    labl: x", "labl: x",
         "models.expert: unknown key 'labl' (did you mean 'label'?); allowed: completions, generation, kind, label"),
        ("results_dir: results/demo", "results_dir: results/demo\ncolour: blue", "colour: blue",
         "(top level): unknown key 'colour'; allowed: baselines, evaluation,"),
        ("    completions: demo/completions/weak\n", "", "  weak:", "models.weak: missing key 'completions'"),
        ("levels: [1, 2]", "levels: [1, 7]", "levels: [1, 7]", "suite.levels.1: 7 is greater than the maximum of 4"),
        ("  timeout_s: 30 ", "  prestart: 0\n  timeout_s: 30 ", "prestart: 0",
         "evaluation.prestart: 0 is less than the minimum of 1"),
    ],
)
def test_a_schema_error_is_one_line_with_file_line_key_and_expectation(tmp_path: Path, old: str, new: str,
                                                                       fragment: str, expected: str) -> None:
    assert old in DEMO_CONFIG
    text = DEMO_CONFIG.replace(old, new, 1)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    message = schema_error(yaml.safe_load(text), SCHEMA, [path])
    assert message is not None and "\n" not in message
    assert message.startswith(f"{path}, line {line_of(text, fragment)}: {expected}")
    assert schema_error(yaml.safe_load(DEMO_CONFIG), SCHEMA, [ROOT / "config.yaml"]) is None


STUDY_CONFIG = (ROOT / "config" / "study.yaml").read_text()


@pytest.mark.parametrize(
    ("old", "new", "fragment", "expected"),
    [
        ("    engine: {dtype", "    engin: {dtype", "engin: {dtype",
         "models.base: unknown key 'engin' (did you mean 'engine'?); allowed: adapter, base_model, cache, decoding, "
         "engine, generation, kind, label, offline"),
        ("decoding: {temperature: 0,", "decoding: {temprature: 0,", "decoding: {temprature",
         "models.base.decoding: unknown key 'temprature' (did you mean 'temperature'?)"),
        ("    base_model: models/Qwen3.8-27B\n", "", "  base:", "models.base: missing key 'base_model'"),
        ("    command: \"claude -p", "    comand: \"claude -p", "comand:", "models.opus55: unknown key 'comand' (did you "
         "mean 'command'?)"),
        ("    kind: vllm", "    kind: vlm", "kind: vlm", "models.base.kind: expected one of cached, reference, vllm, "
         "cli; got 'vlm'"),
        ("    kind: cli\n", "", "  opus55:", "models.opus55: missing key 'kind'"),
    ],
)
def test_a_schema_error_in_a_generated_model_names_its_key(tmp_path: Path, old: str, new: str, fragment: str,
                                                           expected: str) -> None:
    """Each kind has its own $defs entry (oneOf): the error is the one of the entry's own kind, one line."""
    assert old in STUDY_CONFIG
    text = STUDY_CONFIG.replace(old, new, 1)
    path = tmp_path / "study.yaml"
    path.write_text(text)
    message = schema_error(yaml.safe_load(text), SCHEMA, [path])
    assert message is not None and "\n" not in message
    assert message.startswith(f"{path}, line {line_of(text, fragment)}: {expected}"), message
    assert schema_error(yaml.safe_load(STUDY_CONFIG), SCHEMA, [ROOT / "config" / "study.yaml"]) is None


def test_a_value_from_the_command_line_is_not_blamed_on_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(DEMO_CONFIG)
    config = yaml.safe_load(DEMO_CONFIG)
    config["evaluation"]["timeout_s"] = "soon"  # as --config evaluation='{timeout_s: soon}' merges it
    message = schema_error(config, SCHEMA, [path])
    assert message is not None
    assert message.startswith(f"{path} (not written there: a --config value?): evaluation.timeout_s: expected number")


def test_cached_folder_with_none_of_the_run_problems_or_ids_the_suite_lacks(tmp_path: Path) -> None:
    suite = {(1, i) for i in range(1, 9)} | {(2, i) for i in range(1, 6)}
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "meta.json").write_text("{}")
    assert cached_folder_problems(empty) == []  # without the run's problems, nothing to compare with
    problems = cached_folder_problems(empty, {(1, 1), (1, 2)}, suite)
    assert problems == [f"completions folder {empty} holds no completion for any of the 2 problems of this run "
                        "(files level<L>_<id>.txt, e.g. level1_1.txt): every row would be missing_completion"]
    zero_based = tmp_path / "zero_based"
    zero_based.mkdir()
    for problem_id in range(0, 8):
        (zero_based / f"level1_{problem_id}.txt").write_text("x")
    (zero_based / "level3_1.txt").write_text("a level this run does not use: not checked")
    assert cached_folder_problems(zero_based, {(1, 1)}, suite) == [
        f"{zero_based / 'level1_0.txt'} names no problem of the suite (level 1 has no problem 0)"]


def test_a_meta_file_is_checked_entry_by_entry_and_unfenced_answers_are_named(tmp_path: Path) -> None:
    folder = tmp_path / "answers"
    folder.mkdir()
    (folder / "level1_1.txt").write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n")  # bare code
    (folder / "level1_2.txt").write_text("Here:\n```python\nclass ModelNew: ...\n```\n")
    (folder / "meta.json").write_text('{"level1_1": {"completion_tokens": 12}, "level1_2": {"completion_tokens": null},'
                                      ' "1_3": {"completion_tokens": 5}, "level1_4": {"completion_tokens": -1}}')
    assert cached_folder_problems(folder) == [
        f"{folder / 'meta.json'}: key '1_3' is not level<L>_<id>",
        f"{folder / 'meta.json'}: level1_4: {{'completion_tokens': -1}} is not {{'completion_tokens': N}} with N a "
        "whole number or null"]
    assert unfenced_answers(folder) == [
        f"{folder / 'level1_1.txt'} defines ModelNew outside any ```python fence: its answer will be no_code"]


# -- end to end: the Snakemake CLI ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the workflow without results, for dry runs that must fail at parse time."""
    return copy_workflow(tmp_path_factory.mktemp("config_errors"))


@pytest.mark.integration
def test_cli_yaml_syntax_error_in_config_yaml_names_file_and_line(workflow: Path) -> None:
    original = (workflow / "config.yaml").read_text()
    broken = original.replace("levels: [1, 2]", "levels: [1, 2", 1)
    (workflow / "config.yaml").write_text(broken)
    try:
        done = snakemake(workflow, "-n", timeout=300)
    finally:
        (workflow / "config.yaml").write_text(original)
    assert done.returncode != 0
    output = "\n".join(error_lines(done))
    assert re.search(r"config\.yaml, line \d+, column \d+: YAML syntax error", output), output
    assert f"began at line {line_of(broken, 'levels: [1, 2')}" in output
    assert len(error_lines(done)) <= 4, output


@pytest.mark.integration
def test_cli_model_written_twice_in_a_configfile_names_file_and_line(workflow: Path) -> None:
    doubled = DEMO_CONFIG.replace("  twin:\n", "  expert:\n    kind: reference\n  twin:\n", 1)
    (workflow / "doubled.yaml").write_text(doubled)
    done = snakemake(workflow, "-n", "--configfile", "doubled.yaml", timeout=300)
    assert done.returncode != 0
    second = [n for n, line in enumerate(doubled.splitlines(), 1) if line == "  expert:"][1]
    assert f"doubled.yaml, line {second}: key 'expert' is written twice" in done.stdout + done.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("timeout_s: 30 ", "timeout_s: soon ", "evaluation.timeout_s: expected number, got 'soon'"),
        ("    label: \"Expert (pure Triton, fused)\"", "    colour: blue",
         "models.expert: unknown key 'colour'; allowed:"),
        ("kind: reference", "kind: magic", "models.calibration.kind: expected one of"),
    ],
)
def test_cli_schema_error_is_short_and_names_file_line_and_key(workflow: Path, old: str, new: str,
                                                               expected: str) -> None:
    text = DEMO_CONFIG.replace(old, new, 1)
    (workflow / "bad.yaml").write_text(text)
    done = snakemake(workflow, "-n", "--configfile", "bad.yaml", timeout=300)
    assert done.returncode != 0
    lines = error_lines(done)
    assert len(lines) <= 4, "\n".join(lines)  # was ~95 lines: Snakemake printed the sub-schema and the instance
    assert any(re.match(rf"bad\.yaml, line {line_of(text, new.strip().splitlines()[-1])}: {re.escape(expected)}",
                        line) for line in lines), "\n".join(lines)


def broken_models(run: SmallRun, name: str, folder: Path | str) -> str:
    """The small run's configuration with garbled's completions folder replaced; returns the configfile name."""
    config = yaml.safe_load((run.work / run.configfile).read_text())
    config["models"]["garbled"]["completions"] = str(folder)
    (run.work / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return f"{name}.yaml"


@pytest.mark.integration
@pytest.mark.parametrize("case", ["missing_folder", "misnamed", "empty", "zero_based", "kernelbench_run", "bad_meta"])
def test_cli_a_bad_completions_folder_stops_a_run_whose_results_exist(small_run: SmallRun, case: str) -> None:
    assert (small_run.work / "results/small/evaluations.parquet").exists()  # the rows exist: nothing may be swallowed
    folder = small_run.work / f"answers_{case}"
    if case != "missing_folder":
        folder.mkdir(exist_ok=True)
    if case == "misnamed":
        (folder / "1_1.txt").write_text("```python\nx = 1\n```\n")  # KernelBench's file stem, not level1_1.txt
    if case == "zero_based":
        for problem_id in (0, 1):
            (folder / f"level1_{problem_id}.txt").write_text("```python\nx = 1\n```\n")
    if case == "kernelbench_run":
        (folder / "level_1_problem_1_sample_0_kernel.py").write_text("class ModelNew: ...\n")
    if case == "bad_meta":
        (folder / "level1_1.txt").write_text("```python\nx = 1\n```\n")
        (folder / "meta.json").write_text('{"level1_1": {"completion_tokens": "812"}}')
    expected = {
        "missing_folder": f"completions folder {folder} does not exist",
        "misnamed": f"{folder / '1_1.txt'} is not named level<L>_<id>.txt",
        "empty": f"completions folder {folder} holds no completion for any of the 2 problems of this run",
        "zero_based": f"{folder / 'level1_0.txt'} names no problem of the suite",
        "kernelbench_run": f"{folder / 'level_1_problem_1_sample_0_kernel.py'} is named as in a KernelBench run folder",
        "bad_meta": f"{folder / 'meta.json'}: level1_1: {{'completion_tokens': '812'}} is not {{'completion_tokens': N}}",
    }[case]
    configfile = broken_models(small_run, case, folder)
    done = small_run.snakemake("-n", timeout=300, configfile=configfile)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    line = line_of((small_run.work / configfile).read_text(), f"completions: {folder}")
    assert f"{configfile}, line {line}: model garbled: {expected}" in output, output


@pytest.mark.integration
def test_cli_a_non_utf8_completion_costs_only_its_own_row_naming_the_file(small_run: SmallRun) -> None:
    rows = pd.read_parquet(small_run.work / "results/small/evaluations.parquet").set_index(["model", "problem_id"])
    assert len(rows) == 3 * 2  # every model x problem has its row
    garbled = rows.loc[("garbled", 2)]
    assert garbled["status"] == "missing_completion"
    assert "garbled/level1_2.txt is not UTF-8 text" in garbled["error"]
    assert rows.loc[("garbled", 1), "status"] == "correct"  # the model's other answer is judged as usual
    assert (rows.loc[[("expert", 1), ("expert", 2), ("twin", 1), ("twin", 2)], "status"] == "correct").all()


@pytest.mark.integration
@pytest.mark.parametrize("case", ["adapter", "frontier_cache", "revision"])
def test_cli_the_study_stops_before_any_job_naming_the_line(tmp_path: Path, kb_dir: Path, case: str) -> None:
    # The study's start-up checks (generation/preflight.py, rules/common.smk): everything else on disk
    # (study_on_disk), then one thing missing.
    work = copy_workflow(tmp_path / "study")
    suite = {"path": str(kb_dir), "fetch": False}
    if case != "revision":
        suite["revision"] = None  # the shared checkout's revision cannot be confirmed: that is the third case
    overlay = study_on_disk(work, suite)
    study = (work / "config" / "study.yaml").read_text()
    if case == "adapter":
        (work / "adapters" / "sft" / "adapter_config.json").unlink()
        (work / "adapters" / "sft").rmdir()
        expected = (f"config/study.yaml, line {line_of(study, 'adapter: adapters/sft')}: model sft: the adapter "
                    "folder adapters/sft does not exist")
    elif case == "frontier_cache":
        settings = yaml.safe_load(overlay.read_text())
        del settings["models"]["opus55"]  # offline, as the study ships it, with nothing in its cache
        overlay.write_text(yaml.safe_dump(settings))
        opus = study.index("  opus55:")
        line = study[:opus].count("\n") + 1 + line_of(study[opus:], "offline: true") - 1
        expected = (f"config/study.yaml, line {line}: model opus55 is offline (it never runs its tool) and the "
                    "completion cache results/study/.store/completions has no answer of it for 200 of the run's 200 "
                    "prompts (level1_1, level1_2, level1_3, level1_4, level1_5 and 195 more)")
    else:
        expected = (f"config/study.yaml, line {line_of(study, '  revision: ')}: KernelBench checkout {kb_dir}: "
                    "revision unknown (not a git checkout")
    dry = snakemake(work, "-n", "--configfile", "config/study.yaml", str(overlay), timeout=300)
    assert dry.returncode != 0
    assert any(line.startswith(expected) for line in error_lines(dry)), error_lines(dry)[:5]
    assert "evaluate" not in dry.stdout  # nothing planned
