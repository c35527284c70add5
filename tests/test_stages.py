"""Unit tests of the pipeline's own stage functions: completions replay, extraction, collect, report context."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from workflow_scripts.analysis.tables import extract_answers
from workflow_scripts.core.layout import ResultsLayout
from workflow_scripts.core.params import ParamsError, parse_params
from workflow_scripts.evaluation.jobs import failed_without_running, key_params, run_settings
from workflow_scripts.generation.replay import reference_completions, rename_reference_model, replay_cached
from workflow_scripts.scoring.rows import build_row, collect_rows, flag_table
from workflow_scripts.scoring.context import build_context

PROBLEMS = pd.DataFrame(
    {"level": [1, 1, 2], "problem_id": [1, 2, 1], "problem": ["A", "B", "C"],
     "path": ["KernelBench/level1/1_A.py", "KernelBench/level1/2_B.py", "KernelBench/level2/1_C.py"],
     "sha256": ["a" * 64, "b" * 64, "c" * 64]}
)


def test_rename_reference_model_renames_only_the_name_token() -> None:
    source = "class Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n        self.ModelX = 'Model'\n"
    renamed = rename_reference_model(source)
    assert "class ModelNew(nn.Module)" in renamed and "super(ModelNew, self)" in renamed
    assert "self.ModelX = 'Model'" in renamed  # other names and strings untouched


def test_replay_cached_missing_and_empty_files_are_failed_rows(tmp_path: Path) -> None:
    (tmp_path / "level1_1.txt").write_text("Here:\n```python\nx = 1\n```\n")
    (tmp_path / "level1_2.txt").write_text("   \n")
    (tmp_path / "meta.json").write_text(json.dumps({"level1_1": {"completion_tokens": 12}}))
    records = replay_cached("m", tmp_path, PROBLEMS, {"level1_1": "p1"})
    assert [(r.level, r.problem_id, r.status) for r in records] == [(1, 1, "ok"), (1, 2, "failed"), (2, 1, "missing")]
    assert records[0].completion_tokens == 12 and records[0].prompt_sha256 == "p1"
    assert records[1].text is None and records[2].text is None  # never an empty "ok" answer


def test_reference_completions_are_the_renamed_reference(tmp_path: Path) -> None:
    for path in PROBLEMS["path"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("class Model:\n    pass\n")
    records = reference_completions("calibration", tmp_path, PROBLEMS)
    assert all(r.status == "ok" and "class ModelNew" in r.text and r.text.startswith("```python") for r in records)


def test_extract_answers_gives_every_problem_a_row() -> None:
    completions = [
        {"model": "m", "level": 1, "problem_id": 1, "status": "ok", "text": "```python\ncode\n```", "completion_tokens": 5},
        {"model": "m", "level": 1, "problem_id": 2, "status": "ok", "text": "no fence here", "completion_tokens": None},
    ]
    frame = extract_answers(completions, PROBLEMS, require_triton=True)
    assert list(frame["extract_status"]) == ["ok", "no_code", "missing_completion"]
    assert frame.loc[0, "code"] == "code" and frame.loc[0, "code_sha256"] is not None
    assert pd.isna(frame.loc[2, "completion_tokens"])


def test_failed_without_running_maps_to_statuses() -> None:
    assert failed_without_running({"extract_status": "missing_completion", "completion_status": "missing"}, "cpu")["status"] == "missing_completion"
    assert failed_without_running({"extract_status": "no_code", "completion_status": "ok"}, "cpu")["status"] == "no_code"


def test_key_params_leave_out_placement_and_secrets() -> None:
    from workflow_scripts.evaluation.answer import EvalConfig

    a = key_params(EvalConfig(device="cpu", gpu_index=0, lock_dir="/x", hidden_seeds=[1]))
    # How many answer processes start at once changes when an answer is judged, not its result.
    b = key_params(EvalConfig(device="cpu", gpu_index=3, lock_dir="/y", hidden_seeds=[2], prestart=4))
    assert a == b
    assert key_params(EvalConfig(device="cpu", atol=1e-3)) != a


def evaluation(status: str, runtime_ms: float | None = None, flags: list[str] | None = None) -> dict:
    return {"status": status, "runtime_ms": runtime_ms, "flags": flags or [], "device": "cpu", "timing_mode": "x"}


CODE = "source:" + "e" * 64
BASELINE = {"eager_ms": 2.0, "eager_status": "ok", "compile_ms": 30.0, "compile_status": "ok"}


def test_build_row_speedups_and_flags() -> None:
    problem = PROBLEMS.iloc[0].to_dict()
    answer = {"completion_tokens": 7, "completion_sha256": "c", "code_sha256": "d", "require_triton": True}
    row = build_row("m", problem, answer, {"keeps_torch_op": False}, evaluation("correct", 1.0), BASELINE, CODE)
    assert row["correct"] and row["compiled"] and row["speedup_eager"] == 2.0 and row["speedup_compile"] == 30.0
    assert row["flag_list"] == "suspicious_speedup"  # above 10x against torch.compile
    assert row["code_version"] == CODE
    failed = build_row("m", problem, answer, {}, evaluation("mismatch", 1.0), {"eager_status": "timeout"}, CODE)
    assert not failed["correct"] and failed["compiled"] and failed["runtime_ms"] is None
    assert failed["speedup_eager"] is None and failed["keeps_torch_op"] is None
    baseline_failed = build_row("m", problem, answer, {}, evaluation("correct", 1.0), {"eager_status": "error: x",
                                                                                        "eager_ms": 5.0}, CODE)
    assert baseline_failed["eager_ms"] is None and baseline_failed["speedup_eager"] is None
    load = build_row("m", problem, answer, {}, evaluation("load_error"), BASELINE, CODE)
    assert not load["compiled"]


def test_eager_speedup_uses_the_reference_timed_beside_the_answer() -> None:
    """Paired timing: the eager reference timed beside the answer is its eager baseline; torch.compile's stays the
    baseline stage's; a failed eager baseline stage still means no eager speedup."""
    problem = PROBLEMS.iloc[0].to_dict()
    answer = {"completion_tokens": 7, "completion_sha256": "c", "code_sha256": "d", "require_triton": True}
    paired = dict(evaluation("correct", 1.0), paired_reference={"stats": {"mean": 1.5}})
    row = build_row("m", problem, answer, {}, paired, BASELINE, CODE)
    assert (row["eager_ms"], row["eager_source"], row["speedup_eager"]) == (1.5, "paired", 1.5)
    assert row["speedup_compile"] == 30.0
    unpaired = build_row("m", problem, answer, {}, evaluation("correct", 1.0), BASELINE, CODE)
    assert (unpaired["eager_ms"], unpaired["eager_source"], unpaired["speedup_eager"]) == (2.0, "baseline", 2.0)
    failed = build_row("m", problem, answer, {}, paired, {"eager_status": "error: x", "eager_ms": 5.0}, CODE)
    assert failed["eager_ms"] is None and failed["eager_source"] is None and failed["speedup_eager"] is None


def test_the_headline_statistic_of_core_records_is_the_one_scoring_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """core/records.py HEADLINE_STATISTIC picks "the" time of a timing's stats: changed there (to the median), the
    paired reference's eager time of a row and the figures' timing footnote follow, with no other edit."""
    from workflow_scripts.core import records
    from workflow_scripts.scoring.figures import RunFacts

    problem = PROBLEMS.iloc[0].to_dict()
    answer = {"completion_tokens": 7, "completion_sha256": "c", "code_sha256": "d", "require_triton": True}
    paired = dict(evaluation("correct", 1.0), paired_reference={"stats": {"mean": 1.5, "median": 3.0}})
    facts = RunFacts({"overall": 1}, 1, ("cpu_wall_interpreter",), {"timing_trials": 10, "warmup": 1}, {})
    assert build_row("m", problem, answer, {}, paired, BASELINE, CODE)["speedup_eager"] == 1.5
    assert "; mean of 10 timed calls" in facts.timing_text()
    monkeypatch.setattr(records, "HEADLINE_STATISTIC", "median")
    row = build_row("m", problem, answer, {}, paired, BASELINE, CODE)
    assert (row["eager_ms"], row["eager_source"], row["speedup_eager"]) == (3.0, "paired", 3.0)
    assert "; median of 10 timed calls" in facts.timing_text()
    assert records.headline_ms({"mean": 1.5}) is None  # no median recorded: no paired time, not the mean


def test_collect_rows_and_flag_table() -> None:
    answers = {"m": pd.DataFrame([{"level": l, "problem_id": p, "completion_tokens": None, "completion_sha256": None,
                                   "code_sha256": None, "require_triton": True}
                                  for l, p in zip(PROBLEMS["level"], PROBLEMS["problem_id"])])}
    static = {"m": pd.DataFrame([{"level": 1, "problem_id": 1, "keeps_torch_op": True}])}
    evaluations = {("m", 1, 1): evaluation("correct", 1.0, ["static:cuda_stream_use"]),
                   ("m", 1, 2): evaluation("rejected_runtime", None, ["inputs_mutated"]),
                   ("m", 2, 1): evaluation("rejected_static")}
    rows = collect_rows(PROBLEMS, ["m"], answers, static, evaluations, {(1, 1): BASELINE}, code_version=CODE)
    assert (rows["code_version"] == CODE).all()
    assert len(rows) == 3 and list(rows["status"]) == ["correct", "rejected_runtime", "rejected_static"]
    table = flag_table(rows).set_index(["kind", "name"])["count"]
    assert table[("flag", "inputs_mutated")] == 1 and table[("status", "rejected_static")] == 1
    assert table[("flag", "static:cuda_stream_use")] == 1


def test_build_context_keeps_config_order_and_runtime() -> None:
    settings = {
        "models": {"b": {"label": "B"}, "a": {"label": "A", "generation": {"model": "x"}}},
        "model_order": ["b", "a"],
        "summary": {"benchmark": {"name": "demo"}, "reference": "b", "resamples": 10, "seed": 42},
        "suite": {}, "prompt": {}, "evaluation": {}, "baselines": {},
    }
    context = build_context(settings, {"device": "cuda", "torch": "2.11", "gpu_name": "H200"})
    assert list(context["models"]) == ["b", "a"] and context["models"]["a"]["generation"] == {"model": "x"}
    assert context["runtime"]["device"] == "cuda" and context["runtime"]["gpu_name"] == "H200"
    assert context["benchmark"]["settings"]["bootstrap"]["resamples"] == 10


@pytest.mark.parametrize("levels", [[1], [1, 2]])
def test_figure_outputs_follow_levels(levels: list[int]) -> None:
    names = set(ResultsLayout("results").figures(levels))
    assert {f"fast_p_level{level}.png" for level in levels} <= names
    assert "bootstrap_forest.svg" in names and len(names) == 2 * (len(levels) + 3)


def test_check_environment_refuses_timings_from_another_environment(tmp_path: Path) -> None:
    from workflow_scripts.evaluation.environment import fingerprint_key
    from workflow_scripts.evaluation.jobs import check_environment

    recorded = {"device": "cuda", "gpu_name": "NVIDIA H200", "torch": "2.11.0"}
    check_environment({"fingerprint": dict(recorded, gpu_uuid="x", sm_clock_mhz=1980)}, fingerprint_key(recorded), tmp_path)
    check_environment({"status": "no_code"}, fingerprint_key(recorded), tmp_path)  # nothing was measured
    with pytest.raises(SystemExit, match="another environment"):
        check_environment({"fingerprint": dict(recorded, gpu_name="NVIDIA H100")}, fingerprint_key(recorded), tmp_path)


def test_build_context_reports_protocol_not_resources() -> None:
    settings = {
        "models": {"a": {"label": "A", "kind": "cached", "completions": "x"}}, "model_order": ["a"],
        "summary": {"reference": "a", "resamples": 10, "seed": 42},
        "suite": {"path": "s", "levels": [1], "revision": None, "fetch": False, "only": None},
        "prompt": {}, "evaluation": {"device": "cpu", "memory_gb": 40}, "baselines": {},
    }
    benchmark = build_context(settings, {"device": "cpu"})["benchmark"]["settings"]
    assert benchmark["suite"] == {"path": "s", "levels": [1], "revision": None}
    assert benchmark["evaluation"] == {"device": "cpu"}


def test_run_settings_are_a_valid_eval_config(tmp_path: Path) -> None:
    from workflow_scripts.evaluation.answer import EvalConfig

    evaluation = {"device": "cpu", "gpus": [0, 2], "timeout_s": 120, "seed": 42, "correctness_trials": 5,
                  "atol": 1e-4, "rtol": 1e-4, "timing_trials": 100, "warmup": 3, "require_triton": True,
                  "tf32": "pytorch_default", "memory_gb": 40}
    config = parse_params(EvalConfig, run_settings(evaluation, tmp_path))
    assert config.gpus == ["0", "2"] and config.lock_dir.startswith(str(tmp_path)) and config.timeout_s == 120
    with pytest.raises(ParamsError, match="unknown key.*'atoll'"):
        parse_params(EvalConfig, run_settings(dict(evaluation, atoll=1.0), tmp_path))
    with pytest.raises(ParamsError, match="'timeout_s'"):
        parse_params(EvalConfig, run_settings(dict(evaluation, timeout_s="soon"), tmp_path))


def test_params_name_the_key_that_is_wrong() -> None:
    from workflow_scripts.stages.extract import Params

    assert parse_params(Params, '{"model": "m"}') == Params(model="m", require_triton=True)
    with pytest.raises(ParamsError, match="missing key 'model'"):
        parse_params(Params, "{}")
    with pytest.raises(ParamsError, match="'require_triton' is 'yes'"):
        parse_params(Params, '{"model": "m", "require_triton": "yes"}')
    with pytest.raises(ParamsError, match="not JSON"):
        parse_params(Params, "{model: m}")


def test_cached_folder_problems_name_each_bad_path(tmp_path: Path) -> None:
    from workflow_scripts.generation.replay import cached_folder_problems

    assert cached_folder_problems(tmp_path / "absent") == [f"completions folder {tmp_path / 'absent'} does not exist"]
    (tmp_path / "level1_1.txt").write_text("ok")
    (tmp_path / ".DS_Store").write_text("litter")
    (tmp_path / "meta.json").write_text(json.dumps({"level1_1": {"completion_tokens": 3}}))
    assert cached_folder_problems(tmp_path) == []
    (tmp_path / "1_2.txt").write_text("misnamed")
    (tmp_path / "meta.json").write_text("[1, 2]")
    problems = cached_folder_problems(tmp_path)
    assert len(problems) == 2 and "1_2.txt is not named level<L>_<id>.txt" in problems[0]
    assert "meta.json is not a JSON object" in problems[1]


def test_a_non_utf8_completion_costs_only_its_own_row(tmp_path: Path) -> None:
    (tmp_path / "level1_1.txt").write_bytes(b"\xff\xfe not utf-8 \x80")
    (tmp_path / "level1_2.txt").write_text("```python\nx = 1\n```\n")
    records = replay_cached("m", tmp_path, PROBLEMS, {})
    assert [(r.problem_id, r.status) for r in records[:2]] == [(1, "failed"), (2, "ok")]
    assert "level1_1.txt is not UTF-8 text" in records[0].error and records[0].text is None
