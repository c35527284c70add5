"""The start-up checks of the generating kinds (workflow_scripts/generation/preflight.py), as functions; through
``snakemake`` on the study's configuration in tests/test_config_errors.py."""

from __future__ import annotations

from pathlib import Path

from workflow_scripts.generation.cache import CompletionCache, PromptItem
from workflow_scripts.generation.cli_tool import CliModel, import_answers, uncached_prompts
from workflow_scripts.generation.kinds import KINDS, CompletionSource
from workflow_scripts.generation.preflight import KIND_CHECKS, RunContext, startup_problems

PROMPTS = [PromptItem(1, 1, "prompt one"), PromptItem(1, 2, "prompt two"), PromptItem(2, 7, "prompt seven")]
LINES = [{"level": p.level, "problem_id": p.problem_id, "prompt": p.prompt, "system": None} for p in PROMPTS]
CLI = {"kind": "cli", "command": "tool --model {model}", "model": "m1", "offline": True}


def vllm(tmp_path: Path, adapter: str | None, **settings) -> dict:
    return {"kind": "vllm", "base_model": str(tmp_path / "base"), "adapter": adapter and str(tmp_path / adapter),
            "decoding": {"temperature": 0, "max_tokens": 8192}, **settings}


def run_context(tmp_path: Path, models: dict) -> RunContext:
    return RunContext(lambda: LINES, {name: tmp_path / "cache" for name in models})


def problems(tmp_path: Path, models: dict, pending: set[str] | None = None) -> list[tuple[tuple[str, ...], str]]:
    found = startup_problems(models, set(models) if pending is None else pending, run_context(tmp_path, models))
    return [(p.keys, p.message) for p in found]


def test_every_kind_that_generates_is_checked() -> None:
    assert set(KIND_CHECKS) == {kind.name for kind in KINDS.values() if kind.source is CompletionSource.CACHE}


def test_a_missing_base_model_is_named_once_for_its_engine_and_missing_adapters_each(tmp_path: Path) -> None:
    (tmp_path / "sft").mkdir()  # a folder, but no adapter_config.json
    models = {"base": vllm(tmp_path, None), "sft": vllm(tmp_path, "sft"), "rl": vllm(tmp_path, "rl")}
    found = problems(tmp_path, models)
    assert [keys for keys, _ in found] == [("models", "base", "base_model"), ("models", "sft", "adapter"),
                                           ("models", "rl", "adapter")]
    assert "models base, sft, rl generate from it" in found[0][1]
    assert "is not a LoRA adapter folder (no adapter_config.json)" in found[1][1]
    assert f"the adapter folder {tmp_path / 'rl'} does not exist" in found[2][1]
    (tmp_path / "base").mkdir()
    (tmp_path / "sft" / "adapter_config.json").write_text("{}")
    (tmp_path / "rl").mkdir()
    (tmp_path / "rl" / "adapter_config.json").write_text("{}")
    assert problems(tmp_path, models) == []


def test_an_adapter_with_its_own_max_tokens_cannot_share_its_base_models_engine(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    other = vllm(tmp_path, None, decoding={"temperature": 0, "max_tokens": 4096})
    found = problems(tmp_path, {"base": vllm(tmp_path, None), "short": other})
    assert [keys for keys, _ in found] == [("models", "short", "decoding")]
    assert "one vLLM engine" in found[0][1] and "4096" in found[0][1]


def test_models_whose_completions_are_written_are_not_checked(tmp_path: Path) -> None:
    models = {"base": vllm(tmp_path, None), "sft": vllm(tmp_path, "sft"), "opus": CLI}
    assert problems(tmp_path, models, pending=set()) == []
    assert [keys for keys, _ in problems(tmp_path, models, pending={"sft"})] == [
        ("models", "sft", "base_model"), ("models", "sft", "adapter")]


def test_an_offline_tool_model_needs_every_prompt_of_the_run_in_its_cache(tmp_path: Path) -> None:
    answers = tmp_path / "answers"
    answers.mkdir()
    (answers / "level1_1.txt").write_text("```python\nclass ModelNew: ...\n```\n")
    (answers / "level2_7.txt").write_text("")  # an empty answer is cached as failed: it is not missing
    cache = CompletionCache(tmp_path / "cache")
    import_answers(CliModel.from_model_entry(CLI), "opus", PROMPTS, cache, answers)
    assert uncached_prompts(CliModel.from_model_entry(CLI), PROMPTS, cache) == [PROMPTS[1]]
    found = problems(tmp_path, {"opus": CLI})
    assert [keys for keys, _ in found] == [("models", "opus", "offline")]
    assert "no answer of it for 1 of the run's 3 prompts (level1_2)" in found[0][1]
    assert problems(tmp_path, {"opus": {**CLI, "offline": False}}) == []  # online: the job runs the tool
    (answers / "level1_2.txt").write_text("an answer")
    import_answers(CliModel.from_model_entry(CLI), "opus", PROMPTS, cache, answers)
    assert problems(tmp_path, {"opus": CLI}) == []


def test_prompts_are_rendered_only_when_a_cache_is_checked(tmp_path: Path) -> None:
    rendered = []
    run = RunContext(lambda: rendered.append(1) or LINES, {})
    (tmp_path / "base").mkdir()
    startup_problems({"base": vllm(tmp_path, None)}, {"base"}, run)
    assert rendered == []
