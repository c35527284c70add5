#!/usr/bin/env bash
# One call on a lent H200 (the device tool): GPU tests, the same answer timed in three separate jobs, then the
# H200 configuration through Snakemake for as long as the lease allows. Writes everything under $OUT.
# Before: `make wheelhouse` (snakemake for Python 3.12) and a KernelBench checkout copied to .kb/.
set -uo pipefail
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site wheelhouse/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt"
python3 -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)" >> "$OUT/gpu.txt"
cat "$OUT/gpu.txt"

# 1. GPU-specific cheats and the cheat/honest suite on the GPU.
SECONDS=0
timeout "${TEST_TIMEOUT:-100}" python3 -m pytest -q -rs -p no:cacheprovider tests/test_cheats.py > "$OUT/pytest_cheats_gpu.txt" 2>&1
echo "cheat suite on GPU: rc=$? in ${SECONDS}s"; tail -5 "$OUT/pytest_cheats_gpu.txt"

# 2. The same answer in three separate evaluation jobs (timing reproducibility across processes).
mkdir -p /tmp/answer && python3 -m workflow_scripts extract --completion bench/kernelbench_answers/ours/level2_76.txt --out /tmp/answer/a.py
for i in 1 2 3; do
  python3 -m workflow_scripts evaluate --problem .kb/KernelBench/level2/76_Gemm_Add_ReLU.py --answer /tmp/answer/a.py \
    --device cuda --out "$OUT/same_answer_$i.json" > /dev/null 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('same answer job', sys.argv[2], d['status'], d['runtime_ms'], (d.get('runtime_stats') or {}).get('std'))" "$OUT/same_answer_$i.json" $i
done

# 3. The pipeline on the H200 subset, until the lease's time is up (the store keeps what finished).
# Archive what has finished every 30 s: the device tool may end the command before its last steps run.
( while sleep 30; do
    tar czf "$OUT/results.tgz.part" results/h200/evaluations results/h200/baselines results/h200/environment results/h200/logs 2>/dev/null \
      && mv "$OUT/results.tgz.part" "$OUT/results.tgz"
  done ) &
ARCHIVER=$!
SECONDS=0
timeout "${PIPELINE_TIMEOUT:-290}" python3 -m snakemake --configfile config/h200.yaml --cores 16 --resources gpu=8 gpu_mem_gb=128 \
  --keep-going > "$OUT/snakemake.log" 2>&1
echo "pipeline: rc=$? in ${SECONDS}s"
kill "$ARCHIVER" 2>/dev/null
python3 bench/h200_table.py --results results/h200 --out-dir "$OUT" > "$OUT/table.txt" 2>&1; tail -14 "$OUT/table.txt"
tar czf "$OUT/results.tgz" results/h200/evaluations results/h200/baselines results/h200/environment results/h200/logs results/h200/summary.json 2>/dev/null
ls -la "$OUT"
