# Triton KernelBench pipeline: generation -> extraction -> static analysis -> evaluation -> collect -> summary.
# The rules live in rules/<stage>.smk; each runs one module, workflow_scripts/stages/<rule>.py (docs/design.md).
# Default configuration: the bundled demo suite (config.yaml). The study: --configfile config/study.yaml.

# config.yaml is the default; a --configfile replaces it (rules/common.smk loads and validates the configuration).

# `snakemake --report report.html` after a run: report/workflow.rst, then the items marked report() (rules/report.smk
# composes the captions).

include: "rules/common.smk"
include: "rules/problems.smk"
include: "rules/generation.smk"
include: "rules/answers.smk"
include: "rules/evaluation.smk"
include: "rules/report.smk"
include: "rules/store.smk"


rule all:
    input:
        final_targets(),
    default_target: True
