#!/usr/bin/env bash
# One device call of issue 34's whole-DAG comparison (bench/dag_vs_kernelbench.py on config/dag_bench.yaml):
#   SIDE=pipeline bash bench/dag_bench_run.sh      # snakemake to summary.json, baselines included (FRESH=1: from empty)
#   SIDE=kernelbench bash bench/dag_bench_run.sh   # KernelBench's harness, 4 processes under a GPU lock (resumes)
# env: SIDE, CONFIGS (default config/dag_bench.yaml; overlays after it, e.g. config/yield_gpu.yaml), FRESH (pipeline,
# default 1; 0 goes on from a cut-off call), SNAKEMAKE_ARGS, TIMEOUT_S (default 540), RESUME (kernelbench: a
# kernelbench.jsonl in the repository to continue). Before: bash bench/dag_answers.sh (answers into .kb/answers),
# `make wheelhouse` then `rm wheelhouse/numpy-*`. Carry .kb and wheelhouse
# (SIDE=pipeline), .kb and .kbwheels (SIDE=kernelbench): since s38's records all
# three with the tracked files no longer fit the 64 MiB a call carries.
set -uo pipefail
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
B="python3 bench/dag_vs_kernelbench.py --config ${CONFIGS:-config/dag_bench.yaml} --out $OUT"
SECONDS=0
case ${SIDE:?SIDE=pipeline or kernelbench} in
  pipeline)
    # A target of its own: KernelBench's pins (another pydantic) go to /tmp/site.
    # Once per machine: a warm machine's later calls find it (reinstalling into a target warns once per package).
    [ -f /tmp/site-pipeline/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile \
      --target /tmp/site-pipeline wheelhouse/*.whl && touch /tmp/site-pipeline/.installed; } || exit 1
    export PYTHONPATH=/tmp/site-pipeline:$PWD
    # FRESH=0 on a warm machine (its results/ kept) goes on from a call that was cut off.
    $B --side pipeline $([ "${FRESH:-1}" = 1 ] && echo --fresh) --pipeline-timeout-s "${TIMEOUT_S:-540}" \
      --snakemake-args "${SNAKEMAKE_ARGS:---cores all}" > "$OUT/pipeline.log" 2>&1
    echo "pipeline: rc=$? in ${SECONDS}s"  # the results folder is in $OUT/dag_results.tgz
    tail -c 1500 "$OUT/pipeline.log" ;;
  kernelbench)
    [ -f /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
      .kbwheels/*.whl && touch /tmp/site/.installed; } || exit 1
    export PYTHONPATH=/tmp/site:$PWD
    [ -n "${RESUME:-}" ] && [ -f "$RESUME" ] && cp "$RESUME" "$OUT/kernelbench.jsonl"
    timeout "${TIMEOUT_S:-560}" $B --side kernelbench --kb-src .kb/kbsrc --parallel 4 > "$OUT/kernelbench.log" 2>&1
    echo "kernelbench: rc=$? in ${SECONDS}s"
    # A harness process cut off by the timeout must not outlive the call holding GPU memory.
    pkill -9 -f '^([^ ]*/)?python[0-9.]* (-[^ ]+ )*([^ ]*/)?bench/kernelbench_harness\.py' 2>/dev/null
    tail -c 1500 "$OUT/kernelbench.log" ;;
esac
