# Stages 8-9: the per-problem rows, then the published-schema summary, tables, markdown and figures.


rule collect:
    input:
        problems=f"{RESULTS}/problems.parquet",
        answers=expand(f"{RESULTS}/answers/{{model}}.parquet", model=MODELS),
        static=expand(f"{RESULTS}/static/{{model}}.parquet", model=MODELS),
        evaluations=[f for model in MODELS for f in evaluation_files(model)] if PROBLEMS else [],
        baselines=[f"{RESULTS}/baselines/{key}.json" for key in problem_keys()] if PROBLEMS else [],
    output:
        rows=f"{RESULTS}/evaluations.parquet",
        flags=f"{RESULTS}/tables/flags.parquet",
    params:
        models=" ".join(MODELS),
        results=RESULTS,
        store=STORE,
    log:
        f"{RESULTS}/logs/collect.log",
    resources:
        mem_mb=4000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.collect --problems {input.problems} --models {params.models}"
        " --results {params.results} --out {output.rows} --flags-out {output.flags} --store {params.store} > {log} 2>&1"


rule summary:
    input:
        rows=f"{RESULTS}/evaluations.parquet",
        environment=f"{RESULTS}/environment/{DEVICE}.json",
    output:
        json=f"{RESULTS}/summary.json",
        markdown=f"{RESULTS}/summary.md",
        levels=f"{RESULTS}/tables/levels.parquet",
        bootstrap=f"{RESULTS}/tables/bootstrap.parquet",
        figures=[f"{RESULTS}/figures/{name}.{ext}" for name in figure_names() for ext in ("png", "svg")],
    params:
        settings=json.dumps({
            "models": {name: {k: m[k] for k in ("label", "generation", "kind") if k in m}
                       for name, m in config["models"].items()},
            "model_order": MODELS,
            "summary": config["summary"], "evaluation": json.loads(eval_settings()),
            "suite": {k: config["suite"][k] for k in ("path", "levels", "revision")},
            "prompt": config["prompt"], "baselines": config["baselines"],
        }, sort_keys=True),
        figures_dir=f"{RESULTS}/figures",
        store=STORE,
    log:
        f"{RESULTS}/logs/summary.log",
    resources:
        mem_mb=4000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.report --rows {input.rows} --environment {input.environment}"
        " --settings {params.settings:q} --out {output.json} --markdown {output.markdown} --levels {output.levels}"
        " --bootstrap {output.bootstrap}"
        " --figures-dir {params.figures_dir} --store {params.store} > {log} 2>&1 && cat {output.markdown}"


rule model_rows:
    # One model's branch on its own: `snakemake --cores all results/models/<model>.parquet` builds that model's
    # completions, answers, evaluations (and the shared baselines) and nothing of the other models.
    input:
        problems=f"{RESULTS}/problems.parquet",
        answers=f"{RESULTS}/answers/{{model}}.parquet",
        static=f"{RESULTS}/static/{{model}}.parquet",
        evaluations=lambda wc: evaluation_files(wc.model),
        baselines=[f"{RESULTS}/baselines/{key}.json" for key in problem_keys()] if PROBLEMS else [],
    output:
        rows=f"{RESULTS}/models/{{model}}.parquet",
        flags=f"{RESULTS}/models/{{model}}.flags.parquet",
    params:
        results=RESULTS,
        store=STORE,
    log:
        f"{RESULTS}/logs/models/{{model}}.log",
    resources:
        mem_mb=2000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.collect --problems {input.problems} --models {wildcards.model}"
        " --results {params.results} --out {output.rows} --flags-out {output.flags} --store {params.store} > {log} 2>&1"
