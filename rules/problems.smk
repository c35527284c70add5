# Stages 1-2: the suite's problem index and the prompts rendered from it.


rule fetch_kernelbench:
    output:
        f"{SUITE}/.kernelbench_revision",
    params:
        settings=as_params({"revision": config["suite"]["revision"], "archive_url": config["suite"]["archive_url"]}),
        dest=output_folder,
    log:
        LAYOUT.log("fetch_kernelbench"),
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.fetch_kernelbench --params {params.settings:q} --dest {params.dest:q}"
        " > {log} 2>&1"


rule problems:
    input:
        SUITE_FILES,
    output:
        LAYOUT.problems(),
    params:
        settings=as_params({k: config["suite"][k] for k in ("levels", "revision", "expected_problems", "only")}),
        suite=suite_root,
        store=STORE,
    log:
        LAYOUT.log("problems"),
    resources:
        mem_mb=2000,
    conda:
        # torch: each problem's tensors are sized on the meta device (suite/sizes.py), nothing is allocated
        f"../envs/evaluation-{DEVICE}.yaml"
    shell:
        "python -m workflow_scripts.stages.problems --params {params.settings:q} --suite {params.suite:q}"
        " --out {output:q} --store {params.store:q} > {log} 2>&1"


rule prompts:
    input:
        templates=PROMPT_FILES,
        problems=LAYOUT.problems(),
    output:
        LAYOUT.prompts(),
    params:
        settings=as_params(config["prompt"]),
        suite=suite_root,
        store=STORE,
    log:
        LAYOUT.log("prompts"),
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.prompts --params {params.settings:q} --suite {params.suite:q}"
        " --problems {input.problems:q} --out {output:q} --store {params.store:q} > {log} 2>&1"


# On a fresh clone the suite is still to be fetched, so the run plans the fetch alone (the problems are not known
# until it is on disk): Snakemake's "100% done" would read as the whole run.
if PROBLEMS is None:

    onsuccess:
        print(
            f"KernelBench was fetched into {SUITE} at revision {config['suite']['revision']}; this run planned the "
            "fetch only. Run the same command again to run everything else.",
            file=sys.stderr,
        )
