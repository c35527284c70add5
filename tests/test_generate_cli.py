"""Tests of the command-line-tool generation stage and the completion cache, with a real subprocess tool
(``tests/fixtures/fake_cli.py``). Standard library only."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_scripts.devtools.generation_files import read_completions_jsonl, write_prompts_jsonl
from workflow_scripts.generation.cache import (
    RECORD_KEYS,
    CompletionCache,
    CompletionRecord,
    MissingCompletionsError,
    PromptItem,
    cache_key,
    key_material,
)
from workflow_scripts.generation.cli_tool import (
    CliModel,
    generate_with_cli,
    import_answers,
    parse_json_output,
)

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "fixtures" / "fake_cli.py"
PY = shlex.quote(sys.executable)
TOOL = f"{PY} {shlex.quote(str(FAKE))}"

PROMPTS = [
    PromptItem(1, 1, "Write a Triton ReLU.\n"),
    PromptItem(1, 3, "Write a Triton matmul.\n"),
    PromptItem(2, 5, "Fuse conv+bias+relu.\n", system="Answer with one code block."),
]


def entry(extra: str = "", **kw) -> CliModel:
    base = dict(
        command=f"{TOOL} --model {{model}} {extra}".strip(),
        provider="fake-cli",
        model="fake-1",
        reasoning_effort="high",
        output_token_cap=32000,
        attempts=1,
        backoff_s=0.0,
        offline=False,
        timeout_s=60,
    )
    base.update(kw)
    return CliModel(**base)


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- generation


@pytest.mark.integration
def test_json_output_gives_answer_token_counts_and_provenance(tmp_path):
    log = tmp_path / "log.jsonl"
    e = entry(f"--json --effort {{reasoning_effort}} --log {log}", env={"FAKE_CAP": "{output_token_cap}"})
    assert e.resolved_output_format == "text"  # only --output-format json is inferred
    e = CliModel(**{**e.__dict__, "output_format": "json"})
    cache = CompletionCache(tmp_path / "cache")
    recs = generate_with_cli(e, "fake", PROMPTS, cache)
    assert [(r.level, r.problem_id, r.status) for r in recs] == [(1, 1, "ok"), (1, 3, "ok"), (2, 5, "ok")]
    r = recs[0]
    assert set(r.to_dict()) == set(RECORD_KEYS)
    assert f"prompt sha256 {sha(PROMPTS[0].prompt)}" in r.text and "effort high" in r.text
    assert r.completion_tokens == len(r.text.split())
    assert r.prompt_sha256 == sha(PROMPTS[0].prompt) and r.error is None
    p = r.provenance
    assert p["generation_provider"] == "fake-cli" and p["model"] == "fake-1"
    assert p["reasoning_effort"] == "high" and p["output_token_cap"] == 32000
    assert p["usage"] == {"input_tokens": 4, "output_tokens": r.completion_tokens}
    assert p["attempts"] == 1 and p["output_format"] == "json" and "{model}" in p["command"]
    seen = calls(log)
    assert len(seen) == 3
    assert seen[0]["env"] == {"FAKE_CAP": "32000"}  # env values are templated too
    assert seen[0]["cwd_files"] == [] and seen[0]["cwd"] != str(REPO)  # runs in an empty folder
    # A system message without a system placeholder is put before the prompt.
    assert seen[2]["prompt"] == "Answer with one code block.\n\n" + PROMPTS[2].prompt
    # The cache holds the answer under the record's key, with the key material.
    stored = json.loads((tmp_path / "cache" / r.cache_key[:2] / f"{r.cache_key}.json").read_text())
    assert stored["text"] == r.text and cache_key(stored["key_material"]) == r.cache_key


@pytest.mark.integration
def test_raw_stdout_answer_has_no_token_count_and_output_format_json_is_inferred(tmp_path):
    cache = CompletionCache(tmp_path / "cache")
    r = generate_with_cli(entry(), "fake", PROMPTS[:1], cache)[0]
    assert r.status == "ok" and r.text.startswith("Here is the kernel from fake-1.")
    assert r.completion_tokens is None and r.provenance["usage"] is None
    # "--output-format json" in the template switches JSON parsing on.
    e = CliModel(command=f"{TOOL} --json --model {{model}} --output-format json", model="m", offline=False, attempts=1)
    assert e.resolved_output_format == "json"


@pytest.mark.integration
def test_prompt_file_system_file_and_answer_file_placeholders(tmp_path):
    log = tmp_path / "log.jsonl"
    e = entry(f"--prompt-file {{prompt_file}} --system-file {{system_file}} --answer-file {{answer_file}} --log {log}")
    recs = generate_with_cli(e, "fake", PROMPTS, CompletionCache(tmp_path / "cache"))
    assert all(r.status == "ok" for r in recs)
    assert "progress output" not in recs[0].text  # the answer came from {answer_file}, not stdout
    assert "system 'Answer with one code block.'" in recs[2].text
    assert calls(log)[2]["prompt"] == PROMPTS[2].prompt  # system delivered separately, not prepended


@pytest.mark.integration
def test_offline_refuses_and_lists_everything_missing_without_calling(tmp_path):
    log = tmp_path / "log.jsonl"
    cache = CompletionCache(tmp_path / "cache")
    e = entry(f"--log {log}", offline=True)
    with pytest.raises(MissingCompletionsError) as exc:
        generate_with_cli(e, "fake", PROMPTS, cache)
    assert exc.value.missing == [("fake", 1, 1), ("fake", 1, 3), ("fake", 2, 5)]
    assert "fake level 2 problem 5" in str(exc.value)
    assert calls(log) == []
    # allow_missing writes explicit "missing" records instead.
    recs = generate_with_cli(e, "fake", PROMPTS, cache, allow_missing=True)
    assert [r.status for r in recs] == ["missing"] * 3 and all(r.text is None and r.error for r in recs)
    # After an online run, offline serves every answer from the cache with no call.
    online = generate_with_cli(e, "fake", PROMPTS[:2], cache, offline=False)
    n = len(calls(log))
    with pytest.raises(MissingCompletionsError) as exc:
        generate_with_cli(e, "fake", PROMPTS, cache)
    assert exc.value.missing == [("fake", 2, 5)]
    again = generate_with_cli(e, "fake", PROMPTS[:2], cache)
    assert [r.to_dict() for r in again] == [r.to_dict() for r in online]
    assert len(calls(log)) == n


@pytest.mark.integration
def test_retries_with_backoff_then_success(tmp_path):
    state, sleeps = tmp_path / "state", []
    e = entry(f"--fail-times 2 --state {state}", attempts=3, backoff_s=1.5, backoff_factor=2.0)
    r = generate_with_cli(e, "fake", PROMPTS[:1], CompletionCache(tmp_path / "cache"), sleep=sleeps.append)[0]
    assert r.status == "ok" and r.provenance["attempts"] == 3
    assert sleeps == [1.5, 3.0]
    assert state.read_text() == "3"


@pytest.mark.integration
def test_exhausted_retries_record_a_failure_never_an_empty_answer(tmp_path):
    state = tmp_path / "state"
    cache = CompletionCache(tmp_path / "cache")
    e = entry(f"--fail-times 5 --state {state}", attempts=2)
    r = generate_with_cli(e, "fake", PROMPTS[:1], cache, sleep=lambda s: None)[0]
    assert r.status == "failed" and r.text is None and "exit code 1" in r.error and "transient failure 2" in r.error
    assert r.provenance["attempts"] == 2
    assert cache.get_ok(r.cache_key) is None and cache.get_failed(r.cache_key).error == r.error
    # Offline, the recorded failure is reproduced (no call, no error).
    off = generate_with_cli(CliModel(**{**e.__dict__, "offline": True}), "fake", PROMPTS[:1], cache)[0]
    assert off.status == "failed" and off.error == r.error
    # Online again: failures are retried; with the call counter past --fail-times the tool now answers.
    state.write_text("5")
    ok = generate_with_cli(e, "fake", PROMPTS[:1], cache)[0]
    assert ok.status == "ok" and cache.get_failed(ok.cache_key) is None


@pytest.mark.parametrize("flags", ["--empty", "--json --is-error", "--fail-on Triton"])
@pytest.mark.integration
def test_empty_output_tool_error_or_nonzero_exit_is_a_failed_generation(tmp_path, flags):
    e = entry(flags, output_format="json" if "--json" in flags else None)
    r = generate_with_cli(e, "fake", PROMPTS[:1], CompletionCache(tmp_path / "cache"))[0]
    assert r.status == "failed" and r.text is None and r.error
    stored = [q.name for q in (tmp_path / "cache").glob("*/*.json")]
    assert stored == [f"{r.cache_key}.failed.json"]  # recorded as a failure, nothing stored as an answer


@pytest.mark.integration
def test_failure_never_overwrites_a_good_cached_answer(tmp_path):
    cache = CompletionCache(tmp_path / "cache")
    switch, log = tmp_path / "fail-now", tmp_path / "log.jsonl"
    e = entry(f"--fail-if-exists {switch} --log {log}")
    good = generate_with_cli(e, "fake", PROMPTS[:1], cache)[0]
    mat = cache.get_ok(good.cache_key).key_material
    kept = cache.put_failed(good.cache_key, mat, "later failure", {"x": 1})
    assert kept.status == "ok" and kept.text == good.text
    assert cache.get_failed(good.cache_key) is None
    with pytest.raises(ValueError):
        cache.put_ok(good.cache_key, mat, "   \n", 0, {})
    # Once the tool fails, an online run over a cached answer reuses it (no call, nothing overwritten) ...
    switch.touch()
    r = generate_with_cli(e, "fake", PROMPTS[:2], cache)
    assert r[0].status == "ok" and r[0].text == good.text
    assert r[1].status == "failed" and "exit code 4" in r[1].error  # ... while a new problem fails
    assert len(calls(log)) == 2
    assert json.loads((tmp_path / "cache" / good.cache_key[:2] / f"{good.cache_key}.json").read_text())["text"] == good.text
    # A record with status ok can never carry an empty text.
    with pytest.raises(ValueError):
        CompletionRecord("m", 1, 1, "ok", "", None, "x", "y")


def test_cache_key_covers_command_model_effort_cap_env_and_system(tmp_path):
    item = PROMPTS[0]
    base = entry()
    keys = {
        cache_key(key_material(item, e.identity(), dict(e.decoding)))
        for e in [
            base,
            CliModel(**{**base.__dict__, "command": base.command + " --json"}),
            CliModel(**{**base.__dict__, "model": "fake-2"}),
            CliModel(**{**base.__dict__, "reasoning_effort": "low"}),
            CliModel(**{**base.__dict__, "output_token_cap": 8000}),
            CliModel(**{**base.__dict__, "env": {"FAKE_X": "1"}}),
            CliModel(**{**base.__dict__, "decoding": {"temperature": "tool default"}}),
        ]
    }
    keys.add(cache_key(key_material(PromptItem(1, 1, item.prompt, system="s"), base.identity(), {})))
    assert len(keys) == 8
    # Bookkeeping fields do not change what the model is asked, so they keep the key.
    same = CliModel(**{**base.__dict__, "attempts": 9, "provider": "renamed", "timeout_s": 5})
    assert same.identity() == base.identity()


def test_entry_validation():
    with pytest.raises(ValueError, match="uses \\{reasoning_effort\\}"):
        CliModel(command="tool --effort {reasoning_effort}")
    with pytest.raises(ValueError, match="unknown keys"):
        CliModel.from_mapping({"command": "tool", "temprature": 0})
    with pytest.raises(ValueError, match="not a cli model entry"):
        CliModel.from_mapping({"kind": "vllm", "command": "x"})
    e = CliModel.from_mapping({"kind": "cli", "command": "tool -c '{\"a\": 1}' {model}", "tool_model": "m"})
    assert e.model == "m" and e.offline is True and e.attempts == 3


def test_parse_json_output_variants():
    r = parse_json_output('{"type":"system"}\n{"type":"result","result":"hi","usage":{"completion_tokens":7}}\n')
    assert r.text == "hi" and r.completion_tokens == 7
    assert parse_json_output("not json").error
    assert parse_json_output('{"result": 5}').error


@pytest.mark.integration
def test_the_entrys_parallel_runs_that_many_tool_calls_at_once(tmp_path):
    # Each call waits until 3 calls have started: only 3 calls at once can all answer (issue 36).
    def run(parallel: int, timeout_s: float, name: str) -> list[str]:
        e = entry(f"--await-peers 3 {tmp_path / name / 'peers'} {timeout_s}", parallel=parallel)
        return [r.status for r in generate_with_cli(e, "fake", PROMPTS, CompletionCache(tmp_path / name / "cache"))]

    assert run(3, 60, "three") == ["ok"] * 3
    assert run(1, 1, "one") == ["failed"] * 3  # one at a time: each waits alone
    with pytest.raises(ValueError, match="parallel must be at least 1"):
        entry(parallel=0)


def test_parallel_jobs(tmp_path):
    recs = generate_with_cli(entry(), "fake", PROMPTS, CompletionCache(tmp_path / "cache"), jobs=3)
    assert [(r.level, r.problem_id) for r in recs] == [(1, 1), (1, 3), (2, 5)] and all(r.status == "ok" for r in recs)


# -------------------------------------------------------------------------------------------------- import


def test_import_directory_then_offline_generate(tmp_path):
    src = tmp_path / "answers"
    src.mkdir()
    (src / "level1_1.txt").write_text("```python\nclass ModelNew: ...\n```\n")
    (src / "level1_3.md").write_text("Answer 3\n```python\npass\n```\n")
    (src / "level2_5.txt").write_text("  \n")  # empty answer -> failed generation
    (src / "meta.json").write_text(json.dumps({"level1_1": {"completion_tokens": 812}}))
    (src / "notes.txt").write_text("ignored: not an answer name")
    cache = CompletionCache(tmp_path / "cache")
    e = entry(offline=True)
    rep = import_answers(e, "fake", PROMPTS, cache, src, {"source": "published run", "date": "2026-01-01"})
    assert rep.imported == [(1, 1), (1, 3)] and rep.failed == [(2, 5)] and rep.unknown == []
    recs = generate_with_cli(e, "fake", PROMPTS, cache)  # offline: served from the cache, no tool
    assert [r.status for r in recs] == ["ok", "ok", "failed"]
    assert recs[0].completion_tokens == 812 and recs[1].completion_tokens is None
    assert recs[0].provenance["import_provenance"] == {"source": "published run", "date": "2026-01-01"}
    assert recs[0].provenance["generation_provider"] == "fake-cli" and recs[0].provenance["imported_from"] == str(src)
    assert recs[2].error == "imported answer is empty"
    # Re-import: unchanged; a different answer is a conflict (kept) unless replace.
    (src / "level1_3.md").write_text("a different answer")
    rep = import_answers(e, "fake", PROMPTS, cache, src)
    assert rep.unchanged == [(1, 1)] and rep.conflicts == [(1, 3)]
    assert "Answer 3" in generate_with_cli(e, "fake", PROMPTS, cache)[1].text
    rep = import_answers(e, "fake", PROMPTS, cache, src, replace=True)
    assert rep.imported == [(1, 3)]
    assert generate_with_cli(e, "fake", PROMPTS, cache)[1].text == "a different answer"


def test_import_jsonl_and_unknown_problems(tmp_path):
    src = tmp_path / "answers.jsonl"
    rows = [
        {"level": 1, "problem_id": 1, "text": "one", "completion_tokens": 5},
        {"level": 1, "problem_id": 3, "text": "three"},
        {"level": 9, "problem_id": 9, "text": "unknown problem"},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cache = CompletionCache(tmp_path / "cache")
    e = entry(offline=True)
    with pytest.raises(ValueError, match="level9_9"):
        import_answers(e, "fake", PROMPTS, cache, src)
    rep = import_answers(e, "fake", PROMPTS, cache, src, allow_unknown=True)
    assert rep.imported == [(1, 1), (1, 3)] and rep.unknown == [(9, 9)] and rep.without_answer == [(2, 5)]
    recs = generate_with_cli(e, "fake", PROMPTS, cache, allow_missing=True)
    assert [(r.status, r.text, r.completion_tokens) for r in recs] == [
        ("ok", "one", 5), ("ok", "three", None), ("missing", None, None)
    ]


# ----------------------------------------------------------------------------------------------------- CLI


def run_cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "generate-cli", *map(str, args)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False, **kw,
    )


@pytest.mark.integration
def test_cli_generate_offline_online_and_import(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    write_prompts_jsonl(prompts, PROMPTS)
    log = tmp_path / "log.jsonl"
    entry_json = json.dumps({
        "kind": "cli", "command": f"{TOOL} --json --model {{model}} --output-format json --log {log}",
        "provider": "fake-cli", "model": "fake-1", "reasoning_effort": "medium", "output_token_cap": 16000,
        "attempts": 2, "backoff_s": 0,
    })
    common = ["--name", "fake", "--entry-json", entry_json, "--prompts", prompts, "--cache", tmp_path / "cache"]
    out = tmp_path / "out"
    # Offline is the default: refuses, lists every missing problem, exit 2, no call, no output file.
    p = run_cli("generate", *common, "--out-dir", out)
    assert p.returncode == 2 and "3 completion(s)" in p.stderr and "fake level 1 problem 3" in p.stderr
    assert not log.exists() and not (out / "fake.jsonl").exists()
    p = run_cli("generate", *common, "--out-dir", out, "--online", "--answers-root", tmp_path / "answers")
    assert p.returncode == 0, p.stderr
    recs = read_completions_jsonl(out / "fake.jsonl")
    assert [r.status for r in recs] == ["ok"] * 3 and all(isinstance(r.completion_tokens, int) for r in recs)
    assert recs[0].provenance["reasoning_effort"] == "medium" and len(calls(log)) == 3
    first = (out / "fake.jsonl").read_bytes()
    assert (tmp_path / "answers" / "fake" / "level1_1.txt").read_text() == recs[0].text
    p = run_cli("generate", *common, "--out-dir", out)  # offline again: same bytes, no new call
    assert p.returncode == 0 and (out / "fake.jsonl").read_bytes() == first and len(calls(log)) == 3
    # Import the written answers under another entry (a different model name for the tool).
    entry2 = json.dumps({**json.loads(entry_json), "model": "fake-2"})
    common2 = ["--name", "fake2", "--entry-json", entry2, "--prompts", prompts, "--cache", tmp_path / "cache"]
    p = run_cli("import", *common2, "--source", tmp_path / "answers" / "fake", "--provenance", '{"by": "test"}')
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["imported"] == 3
    p = run_cli("generate", *common2, "--out-dir", out)
    assert p.returncode == 0, p.stderr
    recs2 = read_completions_jsonl(out / "fake2.jsonl")
    assert [r.text for r in recs2] == [r.text for r in recs]
    assert [r.completion_tokens for r in recs2] == [r.completion_tokens for r in recs]  # via meta.json
    assert recs2[0].provenance["import_provenance"] == {"by": "test"} and recs2[0].provenance["model"] == "fake-2"
    # A bad entry is reported clearly.
    p = run_cli("generate", "--name", "x", "--entry-json", '{"command": "t {reasoning_effort}"}',
                "--prompts", prompts, "--cache", tmp_path / "c2", "--out-dir", out)
    assert p.returncode == 2 and "bad model entry" in p.stderr


@pytest.mark.integration
def test_completions_cli_stage_takes_the_config_entry(tmp_path):
    """The rule's path: the model's whole config entry as --params (pipeline-only keys such as label are dropped)."""
    prompts = tmp_path / "prompts.jsonl"
    write_prompts_jsonl(prompts, PROMPTS)
    log = tmp_path / "log.jsonl"
    config_entry = {
        "kind": "cli", "label": "Fake", "generation": {"provider": "fake"}, "offline": False,
        "command": f"{TOOL} --model {{model}} --log {log}", "provider": "fake-cli", "model": "fake-1",
        "attempts": 1, "backoff_s": 0,
    }

    def stage(params: dict) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "workflow_scripts.stages.completions_cli", "--params", json.dumps(params),
             "--prompts", str(prompts), "--cache", str(tmp_path / "cache"), "--out-dir", str(tmp_path / "out")],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )

    p = stage({"name": "fake", "entry": config_entry})
    assert p.returncode == 0, p.stderr
    recs = read_completions_jsonl(tmp_path / "out" / "fake.jsonl")
    assert [r.status for r in recs] == ["ok"] * 3 and len(calls(log)) == 3
    p = stage({"name": "fake", "entry": {**config_entry, "comand": "typo"}})
    assert p.returncode == 2 and "model fake: bad model entry" in p.stderr and "comand" in p.stderr
    p = stage({"name": "fake"})
    assert p.returncode == 2 and "unknown" not in p.stderr and "bad model entry" in p.stderr
