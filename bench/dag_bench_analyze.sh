#!/usr/bin/env bash
# The CPU-side reading of one pipeline call of bench/dag_bench_run.sh (issue 34), every record beside the call's own:
#   bash bench/dag_bench_analyze.sh CALL_DIR PREFIX KB_JSON [BEFORE]
# CALL_DIR: the call's returned files (dag_vs_kernelbench.json, timeline_<host>.jsonl, dag_results.tgz); PREFIX names
# the records (e.g. bench/archive/h100/<date>-session<N>/<rev>_call1); KB_JSON: the same session's
# dag_vs_kernelbench.json of SIDE=kernelbench (done-when 1's ratio); BEFORE (optional): an earlier call's
# dag_results.tgz, for the baselines' compiled times (done-when 3) and the verdicts side by side (done-when 6).
# EARLIER_CALLS (optional): the returned folders of the same run's earlier calls, cut off and resumed with FRESH=0, in
# order; their walls add to CALL_DIR's (bench/wall_bound.py), whose timeline and results already hold theirs.
set -euo pipefail
CALL=${1:?CALL_DIR}; PREFIX=${2:?PREFIX}; KB=${3:?KB_JSON}; BEFORE=${4:-}
PY=${PYTHON:-.venv/bin/python}
UNPACKED=$(mktemp -d)
trap 'rm -rf "$UNPACKED"' EXIT
tar -xzf "$CALL/dag_results.tgz" -C "$UNPACKED"
RESULTS=$(find "$UNPACKED" -maxdepth 2 -path '*/results/dag_bench*' -type d | head -1)
TIMELINE=$(ls "$CALL"/timeline_*.jsonl | head -1)
EARLIER_RECORDS=()
for earlier in ${EARLIER_CALLS:-}; do EARLIER_RECORDS+=("$earlier/dag_vs_kernelbench.json"); done
$PY bench/wall_bound.py --pipeline "${EARLIER_RECORDS[@]}" "$CALL/dag_vs_kernelbench.json" --kernelbench "$KB" \
  --timeline "$TIMELINE" --out "${PREFIX}_wall_bound.json"
$PY bench/project_study.py --timeline "$TIMELINE" --results "$RESULTS" --out "${PREFIX}_projection.json"
$PY bench/answer_phases.py "$CALL/dag_results.tgz" --out "${PREFIX}_answer_phases.json" > /dev/null
if [ -n "$BEFORE" ]; then
  $PY bench/compare_baselines.py "$BEFORE" "$CALL/dag_results.tgz" --out "${PREFIX}_compare_baselines.json"
  $PY bench/lock_evidence.py "$BEFORE" "$CALL/dag_results.tgz" --out "${PREFIX}_lock_evidence.json"
fi
# What Snakemake's bounds let run at once (this call's log only: a resumed run's earlier calls have logs of their own);
# last, and a log it cannot read costs only this reading.
$PY bench/declared_resources.py --log "$CALL/snakemake.log" --out "${PREFIX}_declared_resources.json" > /dev/null \
  || echo "declared_resources.py: no reading of $CALL/snakemake.log" >&2
