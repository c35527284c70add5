# The content-addressed store's audit: re-hash every object and result file and report mismatches (verify_store),
# or rewrite what an intact copy allows and drop what cannot be restored, to be recomputed (repair_store).


rule verify_store:
    params:
        settings=as_params({"repair": False}),
        store=STORE,
        report=f"{LAYOUT.root}/store_verify.json",
    log:
        LAYOUT.log("verify_store"),
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.verify_store --params {params.settings:q} --store {params.store:q}"
        " --report {params.report:q} 2>&1 | tee {log}"


rule repair_store:
    params:
        settings=as_params({"repair": True}),
        store=STORE,
        report=f"{LAYOUT.root}/store_verify.json",
    log:
        LAYOUT.log("repair_store"),
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.repair_store --params {params.settings:q} --store {params.store:q}"
        " --report {params.report:q} 2>&1 | tee {log}"
