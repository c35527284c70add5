# Stages 4-5: extract each completion's code, then analyse it statically (AST).


rule extract:
    # Answers before evaluations (ANSWERS_FIRST, common.smk): a problem's first evaluate job then judges every model's
    # answer against one reference side.
    priority: ANSWERS_FIRST
    input:
        completions=LAYOUT.completions("{model}"),
        problems=LAYOUT.problems(),
    output:
        LAYOUT.answers("{model}"),
    params:
        # Whether the model's kind must launch Triton (generation/kinds.py: the calibration model, kind reference,
        # answers with the problem's own code and is exempt).
        settings=lambda wc: as_params(
            {"model": wc.model, "require_triton": kind_of(config["models"][wc.model]).require_triton}
        ),
        store=STORE,
    log:
        LAYOUT.log("extract/{model}"),
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.extract --params {params.settings:q} --completions {input.completions:q}"
        " --problems {input.problems:q} --out {output:q} --store {params.store:q} > {log} 2>&1"


rule static_analysis:
    input:
        LAYOUT.answers("{model}"),
    output:
        LAYOUT.static("{model}"),
    params:
        settings=lambda wc: as_params({"model": wc.model}),
        store=STORE,
    log:
        LAYOUT.log("static/{model}"),
    resources:
        mem_mb=1000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.static_analysis --params {params.settings:q} --answers {input:q}"
        " --out {output:q} --store {params.store:q} > {log} 2>&1"
