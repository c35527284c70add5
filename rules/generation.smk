# Stage 3: one completions JSONL per model (docs/generation.md). Cached and calibration models replay;
# vLLM and CLI models generate through their completion caches.


def cached_completion_files(wildcards):
    model = config["models"][wildcards.model]
    if model["kind"] != "cached":
        return []
    folder = Path(model["completions"])
    if not folder.is_dir():
        raise WorkflowError(f"model {wildcards.model}: completions folder {folder} does not exist")
    return sorted(str(p) for p in folder.iterdir() if p.is_file())


rule completions_replay:
    input:
        problems=f"{RESULTS}/problems.parquet",
        prompts=f"{RESULTS}/prompts.jsonl",
        cached=cached_completion_files,
    output:
        f"{RESULTS}/completions/{{model}}.jsonl",
    wildcard_constraints:
        model=model_regex("cached", "reference"),
    params:
        kind=lambda wc: config["models"][wc.model]["kind"],
        source=lambda wc: (f"--source {config['models'][wc.model]['completions']}"
                           if config["models"][wc.model]["kind"] == "cached" else ""),
        suite=SUITE,
        store=STORE,
    log:
        f"{RESULTS}/logs/completions/{{model}}.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.completions --model {wildcards.model} --kind {params.kind} {params.source}"
        " --suite {params.suite} --problems {input.problems} --prompts {input.prompts} --out {output}"
        " --store {params.store} > {log} 2>&1"


COMPLETION_CACHE = f"{STORE}/completions"
# Model-entry keys that only the pipeline reads (the generation CLIs reject unknown keys).
PIPELINE_ONLY_KEYS = {"kind", "label", "generation", "cache", "completions"}


def cli_entry(name):
    return {k: v for k, v in config["models"][name].items() if k not in PIPELINE_ONLY_KEYS}


rule completions_cli:
    input:
        prompts=f"{RESULTS}/prompts.jsonl",
    output:
        f"{RESULTS}/completions/{{model}}.jsonl",
    wildcard_constraints:
        model=model_regex("cli"),
    params:
        entry=lambda wc: json.dumps(cli_entry(wc.model), sort_keys=True),
        cache=lambda wc: config["models"][wc.model].get("cache", COMPLETION_CACHE),
        out_dir=f"{RESULTS}/completions",
    log:
        f"{RESULTS}/logs/completions/{{model}}.log",
    resources:
        mem_mb=2000,
    conda:
        "../envs/generation.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.generate_cli generate --name {wildcards.model} --entry-json {params.entry:q}"
        " --prompts {input.prompts} --cache {params.cache} --out-dir {params.out_dir} > {log} 2>&1"


def vllm_groups():
    """One engine per base model: base folder -> the model names (adapters, or the base itself) it serves."""
    groups = {}
    for name in models_of_kind("vllm"):
        groups.setdefault(config["models"][name]["base_model"], []).append(name)
    return groups


def vllm_arguments(base, names):
    """The generate_vllm flags of one engine; every model of a base must share its decoding and engine."""
    first = config["models"][names[0]]
    for name in names[1:]:
        other = config["models"][name]
        if other.get("decoding") != first.get("decoding") or other.get("engine") != first.get("engine"):
            raise WorkflowError(f"vLLM models {names[0]} and {name} share base {base} but not decoding/engine")
    args = [f"--base {shlex.quote(base)}"]
    for name in names:
        adapter = config["models"][name].get("adapter")
        args.append(f"--adapter {shlex.quote(f'{name}={adapter}')}" if adapter else f"--model {name}")
    decoding = first.get("decoding", {})
    for key in ("max_tokens", "temperature", "top_p", "top_k", "seed"):
        if key in decoding:
            args.append(f"--{key.replace('_', '-')} {decoding[key]}")
    if "enable_thinking" in decoding:
        args.append("--chat-template-kwargs " + shlex.quote(json.dumps({"enable_thinking": decoding["enable_thinking"]})))
    for key, value in (first.get("engine") or {}).items():
        if key in ("dtype", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "batch_size"):
            args.append(f"--{key.replace('_', '-')} {value}")
        elif key == "enforce_eager":
            args.append("--enforce-eager" if value else "")
        else:
            args.append("--engine-arg " + shlex.quote(f"{key}={json.dumps(value)}"))
    if first.get("offline"):
        args.append("--offline")
    return " ".join(a for a in args if a)


for _index, (_base, _names) in enumerate(sorted(vllm_groups().items())):

    rule:
        name:
            f"completions_vllm_{_index}"
        input:
            prompts=f"{RESULTS}/prompts.jsonl",
        output:
            [f"{RESULTS}/completions/{name}.jsonl" for name in _names],
        params:
            arguments=vllm_arguments(_base, _names),
            cache=config["models"][_names[0]].get("cache", COMPLETION_CACHE),
            out_dir=f"{RESULTS}/completions",
        log:
            f"{RESULTS}/logs/completions/vllm_{_index}.log",
        resources:
            mem_mb=32000,
            **gpu_resources(),
        conda:
            "../envs/generation.yaml"
        shell:
            "{PYTHON} -m workflow_scripts.generate_vllm {params.arguments} --prompts {input.prompts}"
            " --cache {params.cache} --out-dir {params.out_dir} > {log} 2>&1"
