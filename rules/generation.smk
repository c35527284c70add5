# Stage 3: one completions JSONL per model (docs/generation.md). Which rule serves a model is its kind's rule in
# generation/kinds.py: cached and calibration models replay; vLLM models generate through one engine per base model,
# CLI models through their tools; both reuse the completion cache.


rule completions_replay:
    priority: ANSWERS_FIRST
    input:
        problems=LAYOUT.problems(),
        prompts=LAYOUT.prompts(),
        cached=cached_completion_files,
    output:
        LAYOUT.completions("{model}"),
    wildcard_constraints:
        model=model_regex("completions_replay"),
    params:
        settings=lambda wc: as_params({"model": wc.model, "kind": config["models"][wc.model]["kind"]}),
        # Quoted here: Snakemake's :q turns an empty value (kind reference has no folder) into nothing, not ''.
        source=lambda wc: shlex.quote(config["models"][wc.model].get("completions", "")),
        suite=SUITE,
        store=STORE,
    log:
        LAYOUT.log("completions/{model}"),
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.completions_replay --params {params.settings:q}"
        " --source {params.source} --suite {params.suite:q} --problems {input.problems:q}"
        " --prompts {input.prompts:q} --out {output:q} --store {params.store:q} > {log} 2>&1"


rule completions_cli:
    priority: ANSWERS_FIRST
    input:
        prompts=LAYOUT.prompts(),
    output:
        LAYOUT.completions("{model}"),
    wildcard_constraints:
        model=model_regex("completions_cli"),
    params:
        settings=lambda wc: as_params({"name": wc.model, "entry": config["models"][wc.model]}),
        cache=lambda wc: completion_cache([wc.model]),
        out_dir=output_folder,
    log:
        LAYOUT.log("completions/{model}"),
    resources:
        mem_mb=2000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.completions_cli --params {params.settings:q}"
        " --prompts {input.prompts:q} --cache {params.cache:q} --out-dir {params.out_dir:q} > {log} 2>&1"


# One rule per base model: its engine serves the base and every LoRA adapter on it in one job.
for _index, (_base, _names) in enumerate(VLLM_ENGINES):

    rule:
        name:
            f"completions_vllm_{_index}"
        priority: ANSWERS_FIRST
        input:
            prompts=LAYOUT.prompts(),
        output:
            [LAYOUT.completions(name) for name in _names] + self_parity_files(_names),
        params:
            settings=as_params({"models": {name: config["models"][name] for name in _names}}),
            cache=completion_cache(_names),
            out_dir=output_folder,
            locks=LAYOUT.locks(),
        log:
            LAYOUT.log(f"completions/vllm_{_index}"),
        resources:
            mem_mb=32000,
            **gpu_resources(),
        conda:
            f"../envs/generation-{DEVICE}.yaml"
        shell:
            "python -m workflow_scripts.stages.completions_vllm --params {params.settings:q}"
            " --prompts {input.prompts:q} --cache {params.cache:q} --out-dir {params.out_dir:q}"
            " --lock-dir {params.locks:q} > {log} 2>&1"
