"""Tests of the vLLM generation stage.

The first group runs anywhere (standard library only): cache keys, folder digests, missing folders, offline
mode, and the stage's bookkeeping driven by a stand-in engine. The second group (marked ``vllm``) runs real
vLLM on a tiny random Qwen3 model built locally (``workflow_scripts.devtools.tiny_models``) and checks that greedy
output through ``generate_with_vllm`` equals transformers' greedy output token for token, with and without a
LoRA adapter; it skips cleanly where vLLM, transformers or peft are not installed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from workflow_scripts.devtools.generation_files import read_completions_jsonl, write_prompts_jsonl
from workflow_scripts.generation import vllm as gv
from workflow_scripts.generation.cache import (
    CompletionCache,
    Decoding,
    MissingCompletionsError,
    PromptItem,
    cache_key,
    folder_digest,
    key_material,
    sha256_text,
)

REPO = Path(__file__).resolve().parents[1]

PROMPTS = [
    PromptItem(1, 1, "Write a Triton kernel for ReLU.\n"),
    PromptItem(1, 2, "Write a Triton kernel for matrix multiplication of two square matrices.\n"),
    PromptItem(2, 7, "Fuse conv, add and relu.", system="You are a careful kernel engineer."),
]


def _fake_base(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "qwen3"}')
    (path / "model.safetensors").write_bytes(b"\x00" * 64 + b"weights")
    return path


def _fake_adapter(path: Path, payload: bytes = b"lora-bytes") -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text('{"r": 8, "target_modules": ["q_proj"]}')
    (path / "adapter_model.safetensors").write_bytes(payload)
    return path


def _key(cache, base, adapter, item=PROMPTS[0], decoding=None, dtype="auto", max_model_len=None):
    decoding = decoding or Decoding()
    ident = gv.model_identity(cache, base, adapter, dtype, max_model_len)
    return cache_key(key_material(item, ident, decoding.to_dict()))


# ----------------------------------------------------------------------------------------- keys and digests


def test_cache_key_changes_when_adapter_bytes_change(tmp_path):
    cache = CompletionCache(tmp_path / "cache")
    base = _fake_base(tmp_path / "base")
    adapter = _fake_adapter(tmp_path / "adapter", b"A" * 100)
    k1 = _key(cache, base, adapter)
    assert k1 == _key(cache, base, adapter)  # stable
    # Same size, one byte different; keep the old mtime too, so only a real re-hash can see it.
    f = adapter / "adapter_model.safetensors"
    st = f.stat()
    f.write_bytes(b"A" * 99 + b"B")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    k2 = _key(cache, base, adapter)
    assert k2 != k1
    # A renamed file, an added file and the base-only identity all change the key as well.
    (adapter / "extra.bin").write_bytes(b"x")
    assert _key(cache, base, adapter) not in (k1, k2)
    assert _key(cache, base, None) not in (k1, k2)


def test_cache_key_covers_prompt_system_and_every_decoding_setting(tmp_path):
    cache = CompletionCache(tmp_path / "cache")
    base = _fake_base(tmp_path / "base")
    k0 = _key(cache, base, None)
    variants = [
        _key(cache, base, None, item=PromptItem(1, 1, PROMPTS[0].prompt + " ")),
        _key(cache, base, None, item=PromptItem(1, 1, PROMPTS[0].prompt, system="sys")),
        _key(cache, base, None, decoding=Decoding(temperature=0.7)),
        _key(cache, base, None, decoding=Decoding(top_p=0.9)),
        _key(cache, base, None, decoding=Decoding(top_k=20)),
        _key(cache, base, None, decoding=Decoding(max_tokens=4096)),
        _key(cache, base, None, decoding=Decoding(seed=1)),
        _key(cache, base, None, decoding=Decoding(chat_template_kwargs={"enable_thinking": True})),
        _key(cache, base, None, dtype="bfloat16"),
        _key(cache, base, None, max_model_len=4096),
    ]
    assert len({k0, *variants}) == len(variants) + 1
    # The problem's id is not part of the key: the same prompt text is the same request.
    assert _key(cache, base, None, item=PromptItem(9, 9, PROMPTS[0].prompt)) == k0


def test_folder_digest_is_memoized_by_size_and_mtime(tmp_path):
    folder = _fake_base(tmp_path / "m")
    memo = tmp_path / "memo.json"
    d1 = folder_digest(folder, memo)
    assert d1 == folder_digest(folder)  # memo or not, same value
    data = json.loads(memo.read_text())
    entry = data[str(folder.resolve())]
    assert entry["sha256"] == d1 and [f[0] for f in entry["files"]] == ["config.json", "model.safetensors"]
    # Prove the memo is used: plant a different digest; unchanged stats -> the planted value comes back.
    entry["sha256"] = "f" * 64
    memo.write_text(json.dumps(data))
    assert folder_digest(folder, memo) == "f" * 64
    # Touching a file (new mtime) invalidates the memo and recomputes the real digest.
    f = folder / "config.json"
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 1000))
    assert folder_digest(folder, memo) == d1
    # Hidden names (hub download metadata) do not count.
    (folder / ".cache").mkdir()
    (folder / ".cache" / "x").write_text("meta")
    assert folder_digest(folder) == d1


def test_missing_model_or_adapter_folder_is_a_clear_error(tmp_path):
    cache = CompletionCache(tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="base model folder not found: .*nope"):
        gv.generate_with_vllm(tmp_path / "nope", {"m": None}, PROMPTS, Decoding(), cache)
    base = _fake_base(tmp_path / "base")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        gv.generate_with_vllm(tmp_path / "empty", {"m": None}, PROMPTS, Decoding(), cache)
    with pytest.raises(FileNotFoundError, match="adapter folder for 'ft' not found"):
        gv.generate_with_vllm(base, {"ft": tmp_path / "gone"}, PROMPTS, Decoding(), cache)
    with pytest.raises(FileNotFoundError, match="no adapter_config.json"):
        gv.generate_with_vllm(base, {"ft": tmp_path / "empty"}, PROMPTS, Decoding(), cache)


def test_lora_rank_rounds_up_to_a_rank_vllm_accepts():
    assert gv.lora_rank_for_engine([8]) == 8
    assert gv.lora_rank_for_engine([4, 12]) == 16
    assert gv.lora_rank_for_engine([]) == 8
    with pytest.raises(ValueError):
        gv.lora_rank_for_engine([1024])


# ------------------------------------------------------------------- stage bookkeeping with a stand-in engine


class _Tok:
    def apply_chat_template(self, messages, tokenize, add_generation_prompt, **kw):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + f"<assistant think={kw.get('enable_thinking')}>"

    def encode(self, text, add_special_tokens):
        assert add_special_tokens is False
        return [ord(c) for c in text]


class _FakeLLM:
    """Echoes a canned answer per prompt; ``answers`` maps a prompt substring to text ('' = empty answer)."""

    def __init__(self, answers, max_model_len=10_000):
        self.answers = answers
        self.calls = []
        self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=max_model_len))

    def get_tokenizer(self):
        return _Tok()

    def generate(self, prompts, params, lora_request=None, use_tqdm=True):
        self.calls.append((prompts, params, lora_request))
        outs = []
        for p in prompts:
            text = "".join(chr(t) for t in p["prompt_token_ids"])
            answer = next((a for k, a in self.answers.items() if k in text), "ok answer")
            comp = types.SimpleNamespace(text=answer, token_ids=list(range(len(answer) + 1)), finish_reason="stop")
            outs.append(types.SimpleNamespace(outputs=[comp]))
        return outs


@pytest.fixture
def fake_vllm(monkeypatch):
    """Stand-in ``vllm`` modules so the stage's bookkeeping runs without vLLM installed."""
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    lora = types.ModuleType("vllm.lora")
    req = types.ModuleType("vllm.lora.request")
    req.LoRARequest = lambda name, int_id, path: ("lora", name, int_id, path)
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", req)):
        monkeypatch.setitem(sys.modules, name, mod)
    return vllm


def test_stage_bookkeeping_with_stand_in_engine(tmp_path, fake_vllm):
    cache = CompletionCache(tmp_path / "cache")
    base = _fake_base(tmp_path / "base")
    adapter = _fake_adapter(tmp_path / "ad")
    # Prompt 2 gets an empty answer from the "model": recorded as failed, never cached as ok.
    llm = _FakeLLM({"matrix multiplication": ""})
    out = gv.generate_with_vllm(base, {"base": None, "ft": adapter}, PROMPTS, Decoding(max_tokens=64), cache, llm=llm)
    assert set(out) == {"base", "ft"}
    # One engine, two calls: base-model requests are never batched with adapter requests.
    assert len(llm.calls) == 2
    (prompts_sent, params, loras), (_, _, loras2) = llm.calls
    assert params.temperature == 0.0 and params.max_tokens == 64
    lora = ("lora", "ft", gv.lora_int_id(folder_digest(adapter)), str(adapter.resolve()))
    assert loras == [None] * 3 and loras2 == [lora] * 3
    for name, recs in out.items():
        assert [(r.level, r.problem_id) for r in recs] == [(1, 1), (1, 2), (2, 7)]
        assert [r.status for r in recs] == ["ok", "failed", "ok"]
        ok = recs[0]
        assert ok.model == name and ok.text == "ok answer" and ok.completion_tokens == len("ok answer") + 1
        assert ok.prompt_sha256 == sha256_text(PROMPTS[0].prompt)
        assert ok.provenance["generation_provider"] == "vllm"
        assert ok.provenance["decoding"]["chat_template_kwargs"] == {"enable_thinking": False}
        assert ok.provenance["adapter_sha256"] == (None if name == "base" else folder_digest(adapter))
        bad = recs[1]
        assert bad.text is None and "empty completion" in bad.error
        assert cache.get_ok(bad.cache_key) is None and cache.get_failed(bad.cache_key) is not None
    # The system message reached the chat template; enable_thinking=False was passed to it.
    assert any("<system>You are a careful" in "".join(chr(t) for t in p["prompt_token_ids"]) for p in prompts_sent)

    # Second run: cached answers are reused; only the failed item is retried, and now it succeeds.
    llm2 = _FakeLLM({})
    out2 = gv.generate_with_vllm(base, {"base": None, "ft": adapter}, PROMPTS, Decoding(max_tokens=64), cache, llm=llm2)
    assert [len(c[0]) for c in llm2.calls] == [1, 1]
    assert all(r.status == "ok" for recs in out2.values() for r in recs)
    assert out2["base"][0].provenance == out["base"][0].provenance  # served from the cache, unchanged

    # A later failure for a cached key does not overwrite the good answer.
    k = out2["base"][1].cache_key
    entry = cache.put_failed(k, cache.get_ok(k).key_material, "boom", {})
    assert entry.status == "ok" and cache.get_ok(k).text == "ok answer"


def test_prompt_longer_than_max_model_len_is_a_failed_generation(tmp_path, fake_vllm):
    cache = CompletionCache(tmp_path / "cache")
    base = _fake_base(tmp_path / "base")
    llm = _FakeLLM({}, max_model_len=80)
    recs = gv.generate_with_vllm(base, {"m": None}, PROMPTS, Decoding(), cache, llm=llm)["m"]
    by_id = {r.problem_id: r for r in recs}
    assert by_id[2].status == "failed" and "max_model_len is 80" in by_id[2].error
    assert by_id[2].text is None and cache.get_ok(by_id[2].cache_key) is None
    assert by_id[1].status == "ok"
    assert len(llm.calls[0][0]) == 1  # the too-long prompts were never sent


def test_fully_cached_run_never_imports_vllm_and_offline_lists_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # any import of vllm now fails
    cache = CompletionCache(tmp_path / "cache")
    base = _fake_base(tmp_path / "base")
    ident = gv.model_identity(cache, base, None, "auto", None)
    for item in PROMPTS[:2]:
        mat = key_material(item, ident, Decoding().to_dict())
        cache.put_ok(cache_key(mat), mat, f"answer {item.problem_id}", 3, {"generation_provider": "vllm"})
    recs = gv.generate_with_vllm(base, {"m": None}, PROMPTS[:2], Decoding(), cache)["m"]
    assert [r.text for r in recs] == ["answer 1", "answer 2"]
    adapter = _fake_adapter(tmp_path / "ad")
    with pytest.raises(MissingCompletionsError) as exc:
        gv.generate_with_vllm(base, {"m": None, "ft": adapter}, PROMPTS, Decoding(), cache, offline=True)
    assert exc.value.missing == [("ft", 1, 1), ("ft", 1, 2), ("ft", 2, 7), ("m", 2, 7)]
    assert "ft level 1 problem 2" in str(exc.value)
    # Another name for the same base model shares its answers (the key is the content, not the name).
    again = gv.generate_with_vllm(base, {"alias": None}, PROMPTS[:2], Decoding(), cache, offline=True)["alias"]
    assert [r.text for r in again] == ["answer 1", "answer 2"] and again[0].model == "alias"


@pytest.mark.integration
def test_cli_offline_reports_missing_and_exits_2(tmp_path):
    base = _fake_base(tmp_path / "base")
    write_prompts_jsonl(tmp_path / "p.jsonl", PROMPTS)
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "generate-vllm", "--base", str(base), "--model", "tiny",
         "--prompts", str(tmp_path / "p.jsonl"), "--out-dir", str(tmp_path / "out"), "--cache", str(tmp_path / "c"),
         "--offline"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "3 completion(s) are not in the cache" in proc.stderr and "tiny level 2 problem 7" in proc.stderr
    assert not (tmp_path / "out" / "tiny.jsonl").exists()


def _entry(base, adapter=None, **decoding):
    return {"kind": "vllm", "label": "x", "base_model": str(base), "adapter": None if adapter is None else str(adapter),
            "decoding": {"temperature": 0, "max_tokens": 8192, "enable_thinking": False, **decoding},
            "engine": {"dtype": "bfloat16", "max_model_len": 16384, "max_lora_rank": 64}}


def test_plan_engine_from_config_entries():
    plan = gv.plan_engine({"base": _entry("m"), "sft": _entry("m", "adapters/sft")})
    assert plan.base == Path("m") and plan.adapters == {"base": None, "sft": Path("adapters/sft")}
    assert plan.decoding == Decoding(max_tokens=8192, chat_template_kwargs={"enable_thinking": False})
    assert plan.engine_kwargs == {"dtype": "bfloat16", "max_model_len": 16384, "max_lora_rank": 64}
    assert plan.batch_size == gv.DEFAULT_BATCH and plan.offline is False
    with pytest.raises(ValueError, match="base and sft share base m but not decoding"):
        gv.plan_engine({"base": _entry("m"), "sft": _entry("m", "adapters/sft", max_tokens=10)})
    groups = gv.engine_groups({"a": _entry("m"), "c": {"kind": "cached"}, "b": _entry("n"), "d": _entry("m", "x")})
    assert groups == {"m": ["a", "d"], "n": ["b"]}


# ---------------------------------------------------------------------------------------- real vLLM on CPU

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("vllm")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from workflow_scripts.devtools.tiny_models import build_tiny_lora, build_tiny_qwen3

    root = tmp_path_factory.mktemp("tiny")
    base = build_tiny_qwen3(root / "tiny-qwen3")
    lora = build_tiny_lora(base, root / "tiny-lora")
    lora2 = build_tiny_lora(base, root / "tiny-lora2", seed=5)
    return types.SimpleNamespace(root=root, base=base, lora=lora, lora2=lora2)


@pytest.fixture(scope="module")
def engine(tiny):
    # In-process engine core (no spawned process) and a small KV cache: fast and light for a test.
    saved = {k: os.environ.get(k) for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE")}
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
    llm = gv.build_engine(tiny.base, [gv.adapter_rank(tiny.lora), gv.adapter_rank(tiny.lora2)], 2, ENGINE_KWARGS)
    yield llm
    del llm
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


ENGINE_KWARGS = {"dtype": "float32", "max_model_len": 512, "enforce_eager": True}


def _hf_greedy(tiny, adapter, prompts, decoding):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny.base))
    model = AutoModelForCausalLM.from_pretrained(str(tiny.base), dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    out = []
    for item in prompts:
        _, ids = gv.render_prompt(tok, item, decoding)
        x = torch.tensor([ids])
        with torch.no_grad():
            y = model.generate(
                input_ids=x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=decoding.max_tokens,
                eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tok.pad_token_id,
            )
        new = y[0, len(ids):].tolist()
        out.append((ids, new, tok.decode(new, skip_special_tokens=True)))
    return out


@pytest.mark.vllm
def test_vllm_greedy_matches_transformers_token_for_token(tiny, engine, tmp_path):
    decoding = Decoding(max_tokens=MAX_TOKENS)
    cache = CompletionCache(tmp_path / "cache")
    # Base model and two adapters in one call (one engine): the base-model answers must not pick up an adapter
    # (vllm-cpu applies the last adapter slot to base requests batched with adapter requests; the stage keeps
    # them in separate batches) and the two adapters must not leak into each other.
    adapters = {"tiny": None, "tiny-lora": tiny.lora, "tiny-lora2": tiny.lora2}
    out = gv.generate_with_vllm(tiny.base, adapters, PROMPTS, decoding, cache, ENGINE_KWARGS, llm=engine)
    # The chat template got enable_thinking=False (Qwen3 style empty think block).
    tok = engine.get_tokenizer()
    text, _ = gv.render_prompt(tok, PROMPTS[2], decoding)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert text.startswith("<|im_start|>system\nYou are a careful kernel engineer.<|im_end|>\n")

    for name, adapter in adapters.items():
        ref = _hf_greedy(tiny, adapter, PROMPTS, decoding)
        for rec, (ids, new, new_text) in zip(out[name], ref):
            assert rec.status == "ok", rec.error
            assert rec.completion_tokens == len(new)
            assert rec.provenance["token_ids_sha256"] == gv.token_ids_sha256(new), (name, rec.problem_id)
            assert rec.text == new_text
            assert rec.provenance["prompt_tokens"] == len(ids)
            assert rec.provenance["finish_reason"] in ("stop", "length")
            assert rec.provenance["dtype"] == "float32"
    # The adapters change the answers (every problem, each adapter differently).
    for a, b, c in zip(out["tiny"], out["tiny-lora"], out["tiny-lora2"]):
        assert len({a.text, b.text, c.text}) == 3
    assert out["tiny-lora"][0].provenance["adapter_sha256"] == folder_digest(tiny.lora)


@pytest.mark.vllm
def test_vllm_changed_adapter_never_reuses_stale_answers(tiny, engine, tmp_path):
    import shutil

    decoding = Decoding(max_tokens=8)
    cache = CompletionCache(tmp_path / "cache")
    lora2 = tmp_path / "lora2"
    shutil.copytree(tiny.lora, lora2)
    first = gv.generate_with_vllm(tiny.base, {"ft": lora2}, PROMPTS[:1], decoding, cache, ENGINE_KWARGS, llm=engine)
    # Rewrite the adapter with other weights (same path, same file names).
    from workflow_scripts.devtools.tiny_models import build_tiny_lora

    shutil.rmtree(lora2)
    build_tiny_lora(tiny.base, lora2, seed=7)
    calls = []
    real_generate = engine.generate

    def counting_generate(*a, **kw):
        calls.append(kw.get("lora_request"))
        return real_generate(*a, **kw)

    engine.generate = counting_generate
    try:
        # Same name, same path, same (reused) engine: only the adapter's bytes changed.
        second = gv.generate_with_vllm(tiny.base, {"ft": lora2}, PROMPTS[:1], decoding, cache, ENGINE_KWARGS, llm=engine)
    finally:
        del engine.generate
    assert len(calls) == 1, "a changed adapter must be generated again, not served from the cache"
    a, b = first["ft"][0], second["ft"][0]
    assert a.cache_key != b.cache_key
    assert a.provenance["adapter_sha256"] != b.provenance["adapter_sha256"]
    # The reused engine really ran the new weights (new LoRA id), not the adapter it had loaded before.
    assert calls[0][0].lora_int_id == gv.lora_int_id(b.provenance["adapter_sha256"])
    assert a.provenance["token_ids_sha256"] != b.provenance["token_ids_sha256"]


@pytest.mark.vllm
def test_self_parity_generates_a_sample_twice_on_the_engine_and_reports_its_agreement(tiny, engine, tmp_path):
    # Issue 36: a small model with a LoRA adapter, two of the three prompts generated twice (one batch, then one at a
    # time). float32 greedy on this CPU backend reproduces itself token for token.
    decoding = Decoding(max_tokens=MAX_TOKENS)
    cache = CompletionCache(tmp_path / "cache")
    reports: dict = {}
    out = gv.generate_with_vllm(tiny.base, {"tiny-lora": tiny.lora}, PROMPTS, decoding, cache, ENGINE_KWARGS,
                                llm=engine, self_parity={"tiny-lora": 2}, parity_reports=reports)
    report = reports["tiny-lora"]
    assert report.model == "tiny-lora" and report.prompts == 2 and report.problems == [[1, 1], [1, 2]]
    assert report.identical == 2 and report.agreement == 1.0 and report.token_agreement == 1.0
    assert report.settings == {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0, "dtype": "float32",
                               "enforce_eager": True, "batch_size": gv.DEFAULT_BATCH, "batch_invariant": False}
    sampled = [r for r in out["tiny-lora"] if "self_parity" in r.provenance]
    assert [(r.level, r.problem_id) for r in sampled] == [(1, 1), (1, 2)]
    assert all(r.provenance["determinism"] == report.settings for r in out["tiny-lora"])  # on every answer
    # Everything cached now: the check still runs on the engine, nothing is generated again.
    calls = []
    real_generate = engine.generate
    engine.generate = lambda *a, **kw: calls.append(len(a[0])) or real_generate(*a, **kw)
    try:
        again: dict = {}
        gv.generate_with_vllm(tiny.base, {"tiny-lora": tiny.lora}, PROMPTS, decoding, cache, ENGINE_KWARGS,
                              llm=engine, self_parity={"tiny-lora": 2}, parity_reports=again)
    finally:
        del engine.generate
    assert calls == [2, 1, 1] and again["tiny-lora"].identical == 2  # one batch of two, then each alone


def test_self_parity_counts_answers_that_differ_between_batches() -> None:
    # A stand-in engine whose answers depend on the batch: the third token differs when prompts share a batch.
    from workflow_scripts.generation.self_parity import measure_self_parity, sample

    def generate(batch):
        return [[7, 8, 9 if len(batch) == 1 else 0, 10] for _ in batch]

    report = measure_self_parity("m", [((1, 1), [1, 2]), ((1, 2), [3])], generate, {"batch_invariant": False})
    assert report.prompts == 2 and report.identical == 0 and report.agreement == 0.0
    assert report.token_agreement == 0.5  # two of four tokens agree before they part
    assert sample(list(range(10)), 3) == [0, 3, 6] and sample([1, 2], 5) == [1, 2] and sample([1], 0) == []


def test_batch_invariant_mode_where_the_model_allows_it_and_why_not_elsewhere(tmp_path, monkeypatch):
    from workflow_scripts.generation.self_parity import BATCH_INVARIANT_ENV, batch_invariant_refusal, use_batch_invariance

    monkeypatch.setenv(BATCH_INVARIANT_ENV, "0")  # off, and whatever the test sets is undone after it
    plain, gdn = tmp_path / "plain", tmp_path / "gdn"
    for folder, config in ((plain, {"layer_types": ["full_attention"] * 4}),
                           (gdn, {"layer_types": ["linear_attention", "full_attention"] * 2})):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
    assert "does not run it" in batch_invariant_refusal(plain, cpu_build=True)
    assert "2 linear-attention layers" in use_batch_invariance(gdn, cpu_build=False)
    assert os.environ[BATCH_INVARIANT_ENV] == "0"  # refused: left off
    cache = CompletionCache(tmp_path / "cache")
    off = gv.model_identity(cache, plain, None, "auto", None, gv.batch_invariant_on())
    assert use_batch_invariance(plain, cpu_build=False) is None and os.environ[BATCH_INVARIANT_ENV] == "1"
    on = gv.model_identity(cache, plain, None, "auto", None, gv.batch_invariant_on())
    assert "batch_invariant" not in off and on == {**off, "batch_invariant": True}  # earlier keys stay as they were


@pytest.mark.vllm
def test_vllm_cli_end_to_end_then_offline(tiny, tmp_path):
    write_prompts_jsonl(tmp_path / "p.jsonl", PROMPTS[:2])
    args = [
        sys.executable, "-m", "workflow_scripts", "generate-vllm", "--base", str(tiny.base), "--model", "tiny",
        "--adapter", f"tiny-lora={tiny.lora}", "--prompts", str(tmp_path / "p.jsonl"),
        "--out-dir", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"), "--max-tokens", "8",
        "--dtype", "float32", "--max-model-len", "512", "--enforce-eager", "--answers-root", str(tmp_path / "ans"),
    ]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("tiny", "tiny-lora"):
        recs = read_completions_jsonl(tmp_path / "out" / f"{name}.jsonl")
        assert [(r.level, r.problem_id, r.status) for r in recs] == [(1, 1, "ok"), (1, 2, "ok")]
        assert all(r.completion_tokens and r.completion_tokens <= 8 for r in recs)
        assert (tmp_path / "ans" / name / "level1_1.txt").read_text() == recs[0].text
    first = (tmp_path / "out" / "tiny-lora.jsonl").read_bytes()
    # Offline rerun: everything comes from the cache, vLLM is never started, output identical.
    (tmp_path / "out" / "tiny-lora.jsonl").unlink()
    proc = subprocess.run(
        args + ["--offline"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "out" / "tiny-lora.jsonl").read_bytes() == first
    assert "Initializing" not in proc.stderr and "vLLM" not in proc.stderr


@pytest.mark.vllm
def test_completions_vllm_stage_runs_config_entries(tiny, tmp_path):
    """The rule's path: config entries as --params, one engine for the base and its adapter."""
    write_prompts_jsonl(tmp_path / "p.jsonl", PROMPTS[:1])
    engine = {"dtype": "float32", "max_model_len": 512, "enforce_eager": True, "batch_invariant": True}
    models = {"tiny": dict(_entry(tiny.base, max_tokens=8), engine=engine),
              "tiny-lora": dict(_entry(tiny.base, tiny.lora, max_tokens=8), engine=engine, self_parity=1)}
    args = [sys.executable, "-m", "workflow_scripts.stages.completions_vllm", "--params", json.dumps({"models": models}),
            "--prompts", str(tmp_path / "p.jsonl"), "--cache", str(tmp_path / "cache"), "--out-dir", str(tmp_path / "out")]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in models:
        recs = read_completions_jsonl(tmp_path / "out" / f"{name}.jsonl")
        assert [(r.status, r.model) for r in recs] == [("ok", name)] and recs[0].completion_tokens <= 8
    # The adapter's self-parity check: its report beside its completions and a line in the job's log.
    parity = json.loads((tmp_path / "out" / "tiny-lora.self_parity.json").read_text())
    assert parity["prompts"] == 1 and parity["identical"] == 1 and parity["problems"] == [[1, 1]]
    assert "self-parity tiny-lora: 1 of 1 sampled prompts identical token for token" in proc.stderr
    assert not (tmp_path / "out" / "tiny.self_parity.json").exists()
    # Batch-invariant mode asked for: the CPU build cannot run it, which the log says, and generation goes on without.
    assert ("WARNING: batch-invariant mode asked for, but off: vLLM's CPU build (vllm-cpu) does not run it"
            in proc.stderr) and parity["settings"]["batch_invariant"] is False
    bad = subprocess.run(args[:4] + [json.dumps({"models": models, "extra": 1})] + args[5:], cwd=REPO,
                         capture_output=True, text=True, timeout=120, env=env, check=False)
    assert bad.returncode == 2 and "unknown key(s) ['extra']" in bad.stderr


def test_the_engines_gpus_are_held_while_it_generates_and_only_then(tmp_path, fake_vllm, monkeypatch):
    """Issue 34: a vLLM job takes the GPUs its engine runs on exclusively (the first tensor_parallel_size visible
    ones), so no evaluation or baseline is timed, or judged, on them meanwhile; a fully cached run holds nothing."""
    from workflow_scripts.core.records import GENERATION_PURPOSE
    from workflow_scripts.evaluation import timeline
    from workflow_scripts.evaluation.gpu_lock import GpuLockTimeout, acquire_gpu
    from workflow_scripts.evaluation.timeline import timeline_path
    from workflow_scripts.stages.completions_vllm import engine_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    locks = tmp_path / "locks"
    assert engine_gpus({}, None) is None  # no lock folder given: nothing to hold
    hold = engine_gpus({"tensor_parallel_size": 1}, locks)
    seen: list[str] = []

    timer_errors: list[BaseException] = []

    def time_on_gpu0() -> None:
        """A job timing an answer on GPU 0 (an exclusive lease, then its timed block on the timeline)."""
        try:
            with acquire_gpu(exclusive=True, gpus=["0"], lock_dir=locks / socket.gethostname(), timeout_s=30.0,
                             purpose="evaluate"):
                start = time.time()
                timeline.append(locks / socket.gethostname(), "timing_answer", "0", start, start + 0.01,
                                problem="p", answer="a.py")
        except BaseException as e:  # noqa: BLE001 - raised again in the test's thread
            timer_errors.append(e)

    timer = threading.Thread(target=time_on_gpu0)

    class _Watching(_FakeLLM):
        def generate(self, prompts, params, lora_request=None, use_tqdm=True):
            for gpu in ("0", "1"):  # what an evaluation job on this host finds while the engine runs
                try:
                    with acquire_gpu(exclusive=False, gpus=[gpu], lock_dir=locks / socket.gethostname(),
                                     timeout_s=0.3):
                        seen.append(f"{gpu} free")
                except GpuLockTimeout:
                    seen.append(f"{gpu} held")
            if timer.ident is None:
                timer.start()  # a job asks to time on GPU 0 while the engine runs, and waits
                time.sleep(0.3)
            return super().generate(prompts, params, lora_request, use_tqdm)

    cache = CompletionCache(tmp_path / "cache")
    base = _fake_base(tmp_path / "base")
    gv.generate_with_vllm(base, {"base": None}, PROMPTS, Decoding(max_tokens=64), cache, llm=_Watching({}), hold=hold)
    timer.join(timeout=30)
    assert not timer.is_alive() and not timer_errors, timer_errors
    assert seen and set(seen) == {"0 held", "1 free"}, seen
    # The GPU timeline shows it: the engine's exclusive lease on GPU 0 (purpose vllm); the timing job asked for the
    # GPU while the engine held it, and timed only after it (scoring/gpu_timeline.py counts any overlap as
    # timed_beside_generation_s).
    lines = [json.loads(line) for line in timeline_path(locks / socket.gethostname()).read_text().splitlines()]
    (engine,) = [e for e in lines if e["activity"] == "lease_exclusive" and e["purpose"] == GENERATION_PURPOSE]
    (asked,) = [e for e in lines if e["activity"] == "lease_acquire" and e["purpose"] == "evaluate"]
    (timing,) = [e for e in lines if e["activity"] == "timing_answer"]
    assert engine["gpu"] == timing["gpu"] == "0" and engine["start"] < asked["start"] < engine["end"]
    assert timing["start"] >= engine["end"]
    with acquire_gpu(exclusive=True, gpus=["0"], lock_dir=locks / socket.gethostname(), timeout_s=1.0):
        pass  # released once the engine is done
    seen.clear()
    gv.generate_with_vllm(base, {"base": None}, PROMPTS, Decoding(max_tokens=64), cache, llm=_Watching({}),
                          hold=lambda: pytest.fail("a fully cached run took the GPU"))
    assert not seen
