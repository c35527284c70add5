# Stages 6-7: the environment fingerprint, shared per-problem baselines and per-answer evaluations.
# GPU jobs declare `gpu` and `gpu_mem_gb`; the job itself locks one specific GPU (Snakemake assigns no ids).


rule environment:
    output:
        f"{RESULTS}/environment/{DEVICE}.json",
    params:
        device=DEVICE,
        tf32=EVAL["tf32"],
    log:
        f"{RESULTS}/logs/environment.log",
    resources:
        mem_mb=2000,
    conda:
        "../envs/evaluation.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.evaluation_jobs environment --device {params.device} --tf32 {params.tf32}"
        " --out {output} > {log} 2>&1"


rule baseline:
    input:
        problem=problem_file,
        environment=f"{RESULTS}/environment/{DEVICE}.json",
    output:
        f"{RESULTS}/baselines/level{{level}}_{{problem_id}}.json",
    wildcard_constraints:
        level=r"\d+",
        problem_id=r"\d+",
    params:
        settings=eval_settings(),
        compile_mode=config["baselines"]["compile_mode"],
        timeout=config["baselines"]["timeout_s"],
        store=STORE,
        locks=LOCKS,
    log:
        f"{RESULTS}/logs/baselines/level{{level}}_{{problem_id}}.log",
    resources:
        mem_mb=8000,
        # Two children (eager, compile), each up to the timeout, plus time waiting for the GPU lock.
        runtime=2 * int(config["baselines"]["timeout_s"] // 60) + 10,
        **gpu_resources(),
    conda:
        "../envs/evaluation.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.evaluation_jobs --store {params.store} --lock-dir {params.locks} baseline"
        " --problem {input.problem} --environment {input.environment} --settings {params.settings:q}"
        " --compile-mode {params.compile_mode} --timeout {params.timeout} --out {output} > {log} 2>&1"


rule evaluate:
    input:
        answers=f"{RESULTS}/answers/{{model}}.parquet",
        problem=problem_file,
        environment=f"{RESULTS}/environment/{DEVICE}.json",
    output:
        f"{RESULTS}/evaluations/{{model}}/level{{level}}_{{problem_id}}.json",
    wildcard_constraints:
        level=r"\d+",
        problem_id=r"\d+",
    params:
        settings=eval_settings(),
        store=STORE,
        locks=LOCKS,
    log:
        f"{RESULTS}/logs/evaluations/{{model}}/level{{level}}_{{problem_id}}.log",
    resources:
        mem_mb=8000,
        runtime=int(EVAL["timeout_s"] // 60) + 10,
        **gpu_resources(),
    conda:
        "../envs/evaluation.yaml"
    shell:
        "{PYTHON} -m workflow_scripts.evaluation_jobs --store {params.store} --lock-dir {params.locks} answer"
        " --answers {input.answers} --level {wildcards.level} --problem-id {wildcards.problem_id}"
        " --problem {input.problem} --environment {input.environment} --settings {params.settings:q}"
        " --out {output} > {log} 2>&1"
