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
        # Optional flags, shell-quoted here (Snakemake's :q turns an empty value into nothing, not '').
        revision=optional_flag("--revision", config["suite"]["revision"]),
        counts=optional_flag("--expected-counts", config["suite"]["expected_problems"]),
        only=optional_flag("--only", config["suite"]["only"]),
        store=STORE,
    log:
        f"{RESULTS}/logs/problems.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.problems --suite {params.suite:q} --levels {params.levels} {params.revision}"
        " {params.counts} {params.only} --out {output} --store {params.store} > {log} 2>&1"


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
