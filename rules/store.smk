# The content-addressed store's audit: re-hash every object and readable name, report (and repair) mismatches.


rule verify_store:
    params:
        store=STORE,
        report=f"{RESULTS}/store_verify.json",
    log:
        f"{RESULTS}/logs/verify_store.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.store verify --store {params.store} --report {params.report} 2>&1 | tee {log}"


rule repair_store:
    params:
        store=STORE,
        report=f"{RESULTS}/store_verify.json",
    log:
        f"{RESULTS}/logs/repair_store.log",
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.store verify --repair --store {params.store} --report {params.report} 2>&1 | tee {log}"
