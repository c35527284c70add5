# Stages 6-7: the environment fingerprint, shared per-problem baselines and per-answer evaluations.
# GPU jobs declare `gpu` and `gpu_mem_gb`; the job itself locks one specific GPU (Snakemake assigns no ids). Evaluate
# and baseline jobs declare their problem's memory (mem_mb, gpu_mem_gb), estimated from its sizes in the problems
# table (common.smk memory_resources).


rule environment:
    output:
        LAYOUT.environment(DEVICE),
    params:
        settings=as_params({"device": DEVICE, "tf32": EVAL["tf32"]}),
        # Not read by the stage: a changed Python, torch, Triton, GPU or driver changes this parameter, so
        # Snakemake re-measures the fingerprint and every timing is re-keyed.
        live=live_facts(DEVICE),
    log:
        LAYOUT.log("environment"),
    resources:
        mem_mb=2000,
    conda:
        f"../envs/evaluation-{DEVICE}.yaml"
    shell:
        "python -m workflow_scripts.stages.environment --params {params.settings:q} --out {output:q} > {log} 2>&1"


rule device_rates:
    # What the device does at best (copy and multiply rates), once per environment: every problem's floor.
    input:
        environment=LAYOUT.environment(DEVICE),
    output:
        LAYOUT.device_rates(DEVICE),
    params:
        settings=as_params({k: EVAL[k] for k in ("device", "tf32", "gpus") if k in EVAL}),
        store=STORE,
        locks=LAYOUT.locks(),
    log:
        LAYOUT.log("device_rates"),
    resources:
        # The measurement takes seconds; the rest waits for the GPU's exclusive lease, as an evaluate job may.
        runtime=int(EVAL["timeout_s"] // 60) + 10,
        mem_mb=4000,
        **gpu_resources(),
    conda:
        f"../envs/evaluation-{DEVICE}.yaml"
    shell:
        "python -m workflow_scripts.stages.device_rates --params {params.settings:q}"
        " --environment {input.environment:q} --out {output:q} --store {params.store:q}"
        " --lock-dir {params.locks:q} > {log} 2>&1"


rule baseline:
    input:
        problem=problem_file,
        environment=LAYOUT.environment(DEVICE),
        # The problem's sizes, read by the memory resources only: ancient, so a rewritten table re-runs nothing.
        problems=ancient(LAYOUT.problems()),
    output:
        LAYOUT.baseline("{level}", "{problem_id}"),
    wildcard_constraints:
        level=r"\d+",
        problem_id=r"\d+",
    params:
        settings=as_params({"evaluation": EVAL, "baselines": config["baselines"]}),
        store=STORE,
        locks=LAYOUT.locks(),
    log:
        LAYOUT.log("baselines/level{level}_{problem_id}"),
    # The cores it reserves: half its torch.compile workers, which are busy only in bursts (evaluation/resources.py).
    threads: baseline_threads()
    # Before the evaluations: a baseline compiles for tens of seconds beside them instead of after them.
    priority: BASELINES_EARLY
    resources:
        # Two children (eager, compile), each up to the timeout, plus time waiting for the GPU lock.
        runtime=2 * int(config["baselines"]["timeout_s"] // 60) + 10,
        # A local run lets a few compile at once (evaluation/resources.py baseline_slots).
        baselines=1,
        # torch.compile's worker processes: a quarter of the cores this run may use unless configured. A resource no
        # run bounds, not a parameter: the count changes how long the compile takes, not what it builds, so a run with
        # other --cores re-runs no baseline.
        compile_workers=baseline_workers(),
        **gpu_resources(),
        **memory_resources("baseline"),
    conda:
        f"../envs/evaluation-{DEVICE}.yaml"
    shell:
        "python -m workflow_scripts.stages.baseline --params {params.settings:q} --problem {input.problem:q}"
        " --environment {input.environment:q} --out {output:q} --store {params.store:q}"
        " --lock-dir {params.locks:q} --compile-threads {resources.compile_workers} > {log} 2>&1"


rule model_names:
    # The configured models' names, which every evaluate job reads (if written) to judge the others along: a file no
    # evaluate job takes as an input or a parameter, so adding, removing or relabelling a model re-runs no other
    # model's evaluation (a parameter listing them did). Written first (ANSWERS_FIRST: it needs nothing), so a run's
    # evaluate jobs find it; collect takes it, which puts it in every run of the default target.
    priority: ANSWERS_FIRST
    output:
        LAYOUT.model_names(),
    params:
        settings=as_params({"models": list(MODELS)}),
    log:
        LAYOUT.log("model_names"),
    resources:
        mem_mb=500,
    conda:
        "../envs/analysis.yaml"
    shell:
        "python -m workflow_scripts.stages.model_names --params {params.settings:q} --out {output:q} > {log} 2>&1"


rule evaluate:
    # One model's answer to one problem, so that targeting one model plans only its branch. The job evaluates the
    # other configured models' answers to the problem along when their tables are already written (the names in
    # <results>/models.json, the tables beside this model's: read if present, never required), against one trusted
    # reference side, and stores them for their own jobs.
    input:
        answers=LAYOUT.answers("{model}"),
        problem=problem_file,
        environment=LAYOUT.environment(DEVICE),
        # The problem's sizes, read by the memory resources only: ancient, so a rewritten table re-runs nothing.
        problems=ancient(LAYOUT.problems()),
    output:
        LAYOUT.evaluation("{model}", "{level}", "{problem_id}"),
    wildcard_constraints:
        level=r"\d+",
        problem_id=r"\d+",
    params:
        settings=lambda wc: as_params(
            {"level": int(wc.level), "problem_id": int(wc.problem_id), "evaluation": EVAL}
        ),
        answers=lambda wc, input: shlex.quote(f"{wc.model}={input.answers}"),
        out=lambda wc, output: shlex.quote(f"{wc.model}={output[0]}"),
        store=STORE,
        results=results_root,
        locks=LAYOUT.locks(),
    log:
        LAYOUT.log("evaluations/{model}/level{level}_{problem_id}"),
    # The first configured model's jobs first: a problem's first job judges its answers, the others find them stored
    # (common.smk).
    priority: evaluation_priority
    resources:
        runtime=int(EVAL["timeout_s"] // 60) + 10,
        # A local run gives each GPU JOBS_PER_GPU evaluations (evaluation/resources.py host_resources); `gpu` adds the
        # baselines' places.
        evaluations=1,
        **gpu_resources(),
        **memory_resources("evaluate"),
    conda:
        f"../envs/evaluation-{DEVICE}.yaml"
    shell:
        "python -m workflow_scripts.stages.evaluate --params {params.settings:q} --answers {params.answers}"
        " --problem {input.problem:q} --environment {input.environment:q} --out {params.out}"
        " --store {params.store:q} --results {params.results:q} --lock-dir {params.locks:q} > {log} 2>&1"
