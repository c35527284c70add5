# Stage 1-2: the suite's problem index and the prompts rendered from it.


rule fetch_kernelbench:
    output:
        f"{SUITE}/.kernelbench_revision",
    params:
        revision=config["suite"]["revision"],
        dest=SUITE,
    log:
        f"{RESULTS}/logs/fetch_kernelbench.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.kernelbench fetch --dest {params.dest} --revision {params.revision} > {log} 2>&1"


rule problems:
    input:
        SUITE_FILES,
    output:
        f"{RESULTS}/problems.parquet",
    params:
        suite=SUITE,
        levels=" ".join(str(level) for level in LEVELS),
        revision=config["suite"]["revision"] or "",
        counts=json.dumps(config["suite"]["expected_problems"]) if config["suite"]["expected_problems"] else "",
        only=json.dumps(config["suite"]["only"]) if config["suite"]["only"] else "",
        store=STORE,
    log:
        f"{RESULTS}/logs/problems.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.problems --suite {params.suite:q} --levels {params.levels} --revision {params.revision:q}"
        " --expected-counts {params.counts:q} --only {params.only:q} --out {output} --store {params.store} > {log} 2>&1"


rule prompts:
    input:
        problems=f"{RESULTS}/problems.parquet",
        templates=PROMPT_FILES,
    output:
        f"{RESULTS}/prompts.jsonl",
    params:
        suite=SUITE,
        backend=config["prompt"]["backend"],
        option=config["prompt"]["option"],
        precision=config["prompt"]["precision"],
        store=STORE,
    log:
        f"{RESULTS}/logs/prompts.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.prompts --suite {params.suite} --problems {input.problems}"
        " --backend {params.backend} --option {params.option} --precision {params.precision}"
        " --out {output} --store {params.store} > {log} 2>&1"
