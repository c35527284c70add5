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
