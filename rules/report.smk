# Stages 8-9: the per-problem rows, then the published-schema summary, tables, markdown and figures.
# What reviewers read is marked report() (`snakemake --report report.html` after a run): captions in report/*.rst
# state n, the protocol and the timing mode from the run's configuration; labels give each item's n.
from collections import Counter

from workflow_scripts.core.layout import BOOTSTRAP_FIGURE, CORRECT_FIGURE, FAST_P_FIGURE, STRATEGY_FIGURE
from workflow_scripts.scoring.captions import write_captions

# Each caption is its item's text (report/<item>.rst) followed by the paragraph all share (report/_protocol.rst.j2),
# composed by the package (Snakemake renders a caption without a template loader, so {% include %} cannot reach
# it) into Snakemake's own working folder; a file is rewritten only when its content changes.
CAPTIONS = write_captions(Path(workflow.basedir, "report"), Path(".snakemake", "report-captions").resolve())


# The report's front page (report/workflow.rst, composed like the captions), before the items marked report().
report: CAPTIONS["workflow"]

# Each item's n (the problems the DAG is built on; the models), shown as label columns.
_PER_LEVEL = Counter(str(level) for level, _ in PROBLEMS or {})
_ALL_LEVELS = ", ".join(f"level {level}: {n}" for level, n in sorted(_PER_LEVEL.items()))
REPORT_N = {"problems": f"{sum(_PER_LEVEL.values())} ({_ALL_LEVELS})", "models": len(MODELS)}
# Figure stem -> caption file in report/, subcategory, labels. A per-level figure names its n in the figure label:
# the report shows a label with two values, each on half the items, as a toggle, and only when there is one such
# label (here the format: PNG or SVG).
REPORTED_FIGURES = {
    FAST_P_FIGURE.format(level=level): (
        "fast_p", "Speed (fast_p)", {"figure": f"fast_p, level {level} ({n} problems)", "models": len(MODELS)}
    )
    for level, n in _PER_LEVEL.items()
} | {
    BOOTSTRAP_FIGURE: (
        "bootstrap_forest", "Paired bootstrap", {"figure": "paired bootstrap vs the reference", **REPORT_N}
    ),
    STRATEGY_FIGURE: ("level2_strategy", "Strategy split", {"figure": "pure Triton vs hybrid", **REPORT_N}),
    CORRECT_FIGURE: ("correct_compiled", "Correctness", {"figure": "compiled and correct", **REPORT_N}),
}
# report() arguments of every figure file.
FIGURE_REPORTS = {
    path: {
        "caption": CAPTIONS[caption],
        "category": "Figures",
        "subcategory": subcategory,
        "labels": {**labels, "format": Path(path).suffix.lstrip(".").upper()},
    }
    for path in summary_figures()
    for caption, subcategory, labels in [REPORTED_FIGURES[Path(path).stem]]
}


rule collect:
    input:
        problems=LAYOUT.problems(),
        device_rates=LAYOUT.device_rates(DEVICE),
        # Not read here: it puts rule model_names into every run of the default target (its evaluate jobs read it).
        models=LAYOUT.model_names(),
        answers=[LAYOUT.answers(model) for model in MODELS],
        static=[LAYOUT.static(model) for model in MODELS],
        evaluations=[f for model in MODELS for f in evaluation_files(model)],
        baselines=baseline_files(),
    output:
        rows=report(LAYOUT.rows(), caption=CAPTIONS["evaluations"], category="Tables",
                    labels={"table": "per-problem rows", **REPORT_N}),
        flags=report(LAYOUT.flags(), caption=CAPTIONS["flags"], category="Tables",
                     labels={"table": "review flags and rejections", **REPORT_N}),
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
        " --device-rates {input.device_rates:q}"
        " --results {params.results:q} --out {output.rows:q} --flags-out {output.flags:q}"
        " --store {params.store:q} > {log} 2>&1"


rule summary:
    input:
        rows=LAYOUT.rows(),
        environment=LAYOUT.environment(DEVICE),
        self_parity=self_parity_files(MODELS),
    output:
        json=report(LAYOUT.summary_json(), caption=CAPTIONS["summary_json"], category="Summary",
                    labels={"file": "summary (published schema)", **REPORT_N}),
        markdown=report(LAYOUT.summary_markdown(), caption=CAPTIONS["summary_markdown"], category="Summary",
                        labels={"file": "headline table", **REPORT_N}),
        levels=report(LAYOUT.table("levels"), caption=CAPTIONS["levels"], category="Tables",
                      labels={"table": "counts per model and level", **REPORT_N}),
        bootstrap=report(LAYOUT.table("bootstrap"), caption=CAPTIONS["bootstrap"], category="Tables",
                         labels={"table": "paired bootstrap", **REPORT_N}),
        figures=[report(path, **FIGURE_REPORTS[path]) for path in summary_figures()],
    params:
        # A function, so that Snakemake does not read braces in the settings (a CLI model's command template,
        # "--model {model}") as wildcards.
        settings=lambda wildcards: as_params({
            "models": config["models"], "model_order": MODELS, "summary": config["summary"],
            "evaluation": EVAL, "suite": config["suite"], "prompt": config["prompt"],
            "baselines": config["baselines"], "calibration": calibration_models(config["models"]),
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
        " --environment {input.environment:q} --self-parity {input.self_parity:q} --results {params.results:q}"
        " --store {params.store:q} > {log} 2>&1 && cat {output.markdown:q}"


# Each run marks its start (not a dry run, nor a run with nothing to do): the timeline's tables are that run's; and
# prints its progress (evaluations and baselines done, their rate, the ETA) as it goes.
onstart:
    mark_run_start(LAYOUT.locks())
    report_progress(
        {"evaluations": [f for model in MODELS for f in evaluation_files(model)], "baselines": baseline_files()},
        config["progress_every_s"],
    )


rule gpu_timeline:
    # After the rows, so after every evaluation and baseline of the run: the timeline the jobs wrote, in one table,
    # and each GPU's busy share.
    input:
        rows=LAYOUT.rows(),
    output:
        timeline=report(LAYOUT.table("gpu_timeline"), caption=CAPTIONS["gpu_timeline"], category="Tables",
                        labels={"table": "GPU timeline", **REPORT_N}),
        usage=report(LAYOUT.table("gpu_usage"), caption=CAPTIONS["gpu_usage"], category="Tables",
                     labels={"table": "GPU usage", **REPORT_N}),
    params:
        settings=as_params({}),
        locks=LAYOUT.locks(),
        store=STORE,
    log:
        LAYOUT.log("gpu_timeline"),
    resources:
        mem_mb=2000,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.gpu_timeline --params {params.settings:q} --rows {input.rows:q}"
        " --locks {params.locks:q} --timeline {output.timeline:q} --usage {output.usage:q}"
        " --store {params.store:q} > {log} 2>&1"


rule model_rows:
    # One model's branch on its own: `snakemake --cores all <results>/models/<model>.parquet` builds that model's
    # completions, answers, evaluations (and the shared baselines) and nothing of the other models.
    input:
        problems=LAYOUT.problems(),
        device_rates=LAYOUT.device_rates(DEVICE),
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
        " --device-rates {input.device_rates:q}"
        " --results {params.results:q} --out {output.rows:q} --flags-out {output.flags:q}"
        " --store {params.store:q} > {log} 2>&1"
