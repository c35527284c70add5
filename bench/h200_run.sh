#!/usr/bin/env bash
# The pipeline itself on a lent H200 (the device tool): `snakemake --configfile config/h200.yaml` (53 KernelBench
# problems, the calibration model and our own Triton answers), as a user runs it, then bench/h200_table.py on what
# finished. Writes everything under $OUT and archives the results folder there as the run goes (a call can be cut
# off before its last steps).
#   bash bench/h200_run.sh
#   env: PIPELINE_TIMEOUT (s, default 420), PIPELINE_ARGS (default "--until evaluate": the answers' evaluations,
#        not the torch.compile baselines; "" for the whole DAG), GPU_JOBS (--resources gpu=, default 4: evaluate
#        jobs preparing at once on one GPU, each times alone under the GPU lock), MEM_MB (default 110000)
# Before: `make wheelhouse`, then `rm wheelhouse/numpy-*` (the image's numpy is used; the device's carry limit is
# 64 MiB), and a KernelBench checkout in .kb/. Carry: wheelhouse, .kb. The archive holds the results folder without
# its store (results.tgz: every evaluation JSON, the jobs' logs): a cut-off run is finished by a run that names the
# missing outputs as targets (PIPELINE_ARGS), not resumed from it.
set -uo pipefail
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# A target of its own: bench/h200_worker_run.sh installs KernelBench's pins (another pydantic) into /tmp/site.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-pipeline wheelhouse/*.whl || exit 1
export PYTHONPATH=/tmp/site-pipeline:$PWD
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$OUT/pipeline_gpu.txt"
python3 -c "import sys, torch, triton, numpy, pandas, pyarrow, snakemake; print(sys.version.split()[0], 'torch', torch.__version__, torch.version.cuda, 'triton', triton.__version__, 'numpy', numpy.__version__, 'pandas', pandas.__version__, 'pyarrow', pyarrow.__version__, 'snakemake', snakemake.__version__)" >> "$OUT/pipeline_gpu.txt" 2>&1
md5sum workflow_scripts/evaluation/*.py workflow_scripts/stages/evaluate.py rules/*.smk >> "$OUT/pipeline_gpu.txt"
cat "$OUT/pipeline_gpu.txt" | head -3

archive() {  # each archive under its own name until whole; tar's status 1 (a log grew while read) still archives
  local part="$OUT/results.tgz.$BASHPID"
  tar czf "$part" --exclude=results/h200/.store --exclude=results/h200/.locks results/h200 2>/dev/null
  if [ $? -le 1 ]; then mv "$part" "$OUT/results.tgz"; else rm -f "$part"; fi
}
( while sleep 20; do archive; done ) &
ARCHIVER=$!
ARGS=${PIPELINE_ARGS-"--until evaluate"}  # split into words below: --until and its rule
SECONDS=0
timeout "${PIPELINE_TIMEOUT:-420}" python3 -m snakemake --configfile config/h200.yaml --cores 16 $ARGS \
  --resources gpu=${GPU_JOBS:-4} gpu_mem_gb=130 mem_mb=${MEM_MB:-110000} > "$OUT/snakemake.log" 2>&1
echo "pipeline: rc=$? in ${SECONDS}s"
kill "$ARCHIVER" 2>/dev/null
archive  # a periodic tar still running writes only its own part file, removed here
rm -f "$OUT"/results.tgz.[0-9]*
python3 bench/h200_table.py --results results/h200 --log "$OUT/snakemake.log" --out-dir "$OUT" > "$OUT/table.txt" 2>&1
tail -30 "$OUT/table.txt"
