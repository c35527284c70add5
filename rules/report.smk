# Stages 8-9: the per-problem rows, then the published-schema summary, tables, markdown and figures.


rule collect:
    input:
        problems=LAYOUT.problems(),
        answers=[LAYOUT.answers(model) for model in MODELS],
        static=[LAYOUT.static(model) for model in MODELS],
        evaluations=[f for model in MODELS for f in evaluation_files(model)],
        baselines=baseline_files(),
    output:
        rows=LAYOUT.rows(),
        flags=LAYOUT.flags(),
    params:
        settings=as_params({"models": MODELS}),
        results=results_root,
        store=STORE,
    log:
        LAYOUT.log("collect"),
    resources:
        mem_mb=4000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.collect --params {params.settings:q} --problems {input.problems:q}"
        " --results {params.results:q} --out {output.rows:q} --flags-out {output.flags:q}"
        " --store {params.store:q} > {log} 2>&1"


rule summary:
    input:
        rows=LAYOUT.rows(),
        environment=LAYOUT.environment(DEVICE),
    output:
        json=LAYOUT.summary_json(),
        markdown=LAYOUT.summary_markdown(),
        levels=LAYOUT.table("levels"),
        bootstrap=LAYOUT.table("bootstrap"),
        figures=summary_figures(),
    params:
        settings=as_params({
            "models": config["models"], "model_order": MODELS, "summary": config["summary"],
            "evaluation": EVAL, "suite": config["suite"], "prompt": config["prompt"],
            "baselines": config["baselines"],
        }),
        results=results_root,
        store=STORE,
    log:
        LAYOUT.log("summary"),
    resources:
        mem_mb=4000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.summary --params {params.settings:q} --rows {input.rows:q}"
        " --environment {input.environment:q} --results {params.results:q} --store {params.store:q}"
        " > {log} 2>&1 && cat {output.markdown:q}"


rule model_rows:
    # One model's branch on its own: `snakemake --cores all <results>/models/<model>.parquet` builds that model's
    # completions, answers, evaluations (and the shared baselines) and nothing of the other models.
    input:
        problems=LAYOUT.problems(),
        answers=LAYOUT.answers("{model}"),
        static=LAYOUT.static("{model}"),
        evaluations=lambda wc: evaluation_files(wc.model),
        baselines=baseline_files(),
    output:
        rows=LAYOUT.model_rows("{model}"),
        flags=LAYOUT.model_flags("{model}"),
    params:
        settings=lambda wc: as_params({"models": [wc.model]}),
        results=results_root,
        store=STORE,
    log:
        LAYOUT.log("models/{model}"),
    resources:
        mem_mb=2000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.model_rows --params {params.settings:q} --problems {input.problems:q}"
        " --results {params.results:q} --out {output.rows:q} --flags-out {output.flags:q}"
        " --store {params.store:q} > {log} 2>&1"
