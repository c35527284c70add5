# Stages 4-5: extract each completion's code, then analyse it statically (AST).


rule extract:
    input:
        completions=f"{RESULTS}/completions/{{model}}.jsonl",
        problems=f"{RESULTS}/problems.parquet",
    output:
        f"{RESULTS}/answers/{{model}}.parquet",
    params:
        exempt=lambda wc: "--no-require-triton" if config["models"][wc.model]["kind"] == "reference" else "",
        store=STORE,
    log:
        f"{RESULTS}/logs/extract/{{model}}.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.answers --model {wildcards.model} --completions {input.completions}"
        " --problems {input.problems} {params.exempt} --out {output} --store {params.store} > {log} 2>&1"


rule static_analysis:
    input:
        f"{RESULTS}/answers/{{model}}.parquet",
    output:
        f"{RESULTS}/static/{{model}}.parquet",
    params:
        store=STORE,
    log:
        f"{RESULTS}/logs/static/{{model}}.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.analyze --model {wildcards.model} --answers {input} --out {output}"
        " --store {params.store} > {log} 2>&1"
