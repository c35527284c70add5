#!/usr/bin/env bash
# One device call (the device tool, nvidia-h200) for bench/gpu_problem_worker.py. Usage:
#   bash bench/h200_worker_run.sh "big spin"            # benches to run (also: cost), in order, each under its own timeout
#   env: RESUME (a gpu_problem_worker.jsonl to continue), BASE_PROBLEMS, BASE_PARALLEL, BASE_ROUNDS, BASE_TIMEOUT, BASE_OLD_CODE, PLANS_ARGS, PLANS_TIMEOUT, RATES_TIMEOUT, VERDICT_PROBLEMS, VERDICT_TIMEOUT, PYTEST_FILES, PYTEST_TIMEOUT, BIG_PROBLEMS, BIG_ARGS, BIG_TIMEOUT, BALLAST_GIB (GPU memory another process holds during big: an H200 as an 80 GB card), TP_PROBLEMS, TP_TIMEOUT, TP_ARGS, SCALING_PROBLEMS, SCALING_TIMEOUT, CAL_TIMEOUT, CAL_PARALLEL, CAL_PROBLEMS, CAL_ARGS, COPIES, COPIES_PROBLEMS, COPIES_TIMEOUT, OLD_CODE, COST_ROUNDS, COST_PROBLEMS, COST_TIMEOUT
# Carry: .kb (KernelBench problems, and KernelBench's harness source in .kb/kbsrc), .kbwheels (pydantic and its
# dependencies for KernelBench's eval.py; psutil and nvidia-ml-py for the evaluator: requirements/gpu-host.txt).
set -uo pipefail
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .kbwheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt"
python3 -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__, 'cpus', __import__('os').cpu_count())" >> "$OUT/gpu.txt"
# What bounds an answer tree's host memory here (a memory cgroup, or the trusted side's polling)
python3 -c "from workflow_scripts.evaluation import memory_cap as m; r = m.cgroup_root(); print('memory cap:', 'cgroup v%d at %s' % (r.version, r.path) if r else 'watch (no writable memory cgroup)')" >> "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
# Resuming a bench cut off in an earlier call: its records (in the repository) go where the bench reads them.
[ -n "${RESUME:-}" ] && [ -f "$RESUME" ] && cp "$RESUME" "$OUT/gpu_problem_worker.jsonl"
B="python3 bench/gpu_problem_worker.py"
# A bench cut off by its timeout can leave its pool worker (the trusted side, a multiprocessing spawn) or
# KernelBench's harness holding GPU memory: none may outlive it. Only interpreters running them are matched: a shell
# whose command line merely mentions them (the device call's own) survives.
cleanup() {
  pkill -9 -f '^([^ ]*/)?python[0-9.]* (-[^ ]+ )*(([^ ]*/)?bench/(gpu_problem_worker|kernelbench_harness)\.py|-m workflow_scripts\.evaluation|from multiprocessing\.spawn)' 2>/dev/null
  sleep 3
}
cleanup
TP_PROBLEMS=${TP_PROBLEMS:-"L1_1 L1_40 L1_95 L2_12 L2_71 L2_99 L1_88 L2_40 L2_76 L2_82"}
for bench in $1; do
  SECONDS=0
  case $bench in
    big) if [ -n "${BALLAST_GIB:-}" ]; then  # a smaller card: this much of the GPU held by another process
           rm -f /tmp/ballast_ready
           python3 -c "import torch, time; x = torch.empty(int($BALLAST_GIB * 2**30), dtype=torch.uint8, device='cuda'); open('/tmp/ballast_ready', 'w').close(); time.sleep(3600)" &
           BALLAST_PID=$!
           for _ in $(seq 60); do [ -f /tmp/ballast_ready ] && break; sleep 1; done
           nvidia-smi --query-gpu=memory.used,memory.total --format=csv >> "$OUT/big.log"
         fi
         timeout ${BIG_TIMEOUT:-330} $B big --suite .kb --problems ${BIG_PROBLEMS:-L1_19 L1_23 L1_47} ${BIG_ARGS:-} --out "$OUT" >> "$OUT/big.log" 2>&1
         rc=$?; [ -n "${BALLAST_PID:-}" ] && kill $BALLAST_PID; (exit $rc) ;;
    spin) timeout 150 $B spin --suite .kb --problems L2_71 L1_12 --out "$OUT" >> "$OUT/spin.log" 2>&1 ;;
    throughput) timeout ${TP_TIMEOUT:-330} $B throughput ${TP_ARGS:-} --suite .kb --per-problem ${TP_PER_PROBLEM:-6} --problems $TP_PROBLEMS --out "$OUT" >> "$OUT/throughput.log" 2>&1 ;;
    # All GPUs, then one (bench/gpu_problem_worker.py run_scaling). Whole problems go to the GPUs, so the last one
    # can leave a GPU idle: 14 problems (84 answers), longest first by their walls in the sixteenth session's
    # calibration, as a scheduler knowing their costs would order them (200 problems make the order moot).
    scaling) timeout ${SCALING_TIMEOUT:-540} $B scaling ${TP_ARGS:-} --suite .kb --per-problem ${TP_PER_PROBLEM:-6} --problems ${SCALING_PROBLEMS:-L1_40 L2_82 L2_78 L2_71 L2_40 L2_60 L1_1 L1_88 L1_95 L1_54 L2_57 L2_12 L2_76 L2_99} --out "$OUT" >> "$OUT/scaling.log" 2>&1 ;;
    trivial) timeout ${TRIVIAL_TIMEOUT:-100} python3 bench/gpu_timing.py --suite .kb --out "$OUT" --repeats ${TRIVIAL_REPEATS:-5} >> "$OUT/trivial.log" 2>&1 ;;
    inputs_check) timeout ${CHECK_TIMEOUT:-300} $B inputs_check --suite .kb --problems ${CHECK_PROBLEMS:-L2_79 L2_15 L1_9 L1_81 L2_70 L2_18} --out "$OUT" >> "$OUT/inputs_check.log" 2>&1 ;;
    pytest) KB_TEST_DEVICE=cuda timeout ${PYTEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider ${PYTEST_FILES:-tests/test_cheats.py tests/test_timed_checks.py tests/test_memory_cap.py} >> "$OUT/pytest.log" 2>&1 ;;
    # Each run in its own folder: the calibration bench skips problems its folder already holds.
    copies) N_COPIES=$((${N_COPIES:-0} + 1)); timeout ${COPIES_TIMEOUT:-120} $B calibration --parallel 1 --copies ${COPIES:-8} --suite .kb --problems ${COPIES_PROBLEMS:-L2_77} --out "$OUT/copies$N_COPIES" >> "$OUT/copies.log" 2>&1 ;;
    # The evaluator's cost against an older commit's, the same problems (the reference as its own answer), rounds
    # alternating old and new (issue 33). OLD_CODE: `git archive <commit> workflow_scripts bench tests/cheats`
    # unpacked in an ignored folder (carried, never committed); each run in its own folder, as calibration skips.
    cost) for r in $(seq ${COST_ROUNDS:-2}); do
        (cd "${OLD_CODE:-.kb/old}" && PYTHONPATH=/tmp/site timeout ${COST_TIMEOUT:-120} python3 bench/gpu_problem_worker.py calibration --suite "$OLDPWD/.kb" --problems ${COST_PROBLEMS:-L2_12 L2_71 L2_40 L2_76 L2_99 L2_82 L1_1 L1_88} --out "$OUT/old$r") >> "$OUT/cost.log" 2>&1
        timeout ${COST_TIMEOUT:-120} $B calibration --suite .kb --problems ${COST_PROBLEMS:-L2_12 L2_71 L2_40 L2_76 L2_99 L2_82 L1_1 L1_88} --out "$OUT/new$r" >> "$OUT/cost.log" 2>&1
      done ;;
    # The baselines (eager and max-autotune) of BASE_PROBLEMS, BASE_PARALLEL jobs at a time, rounds alternating an
    # older commit's baseline code and this one's (issue 34: the compiled time with the compile off the exclusive
    # lease). BASE_OLD_CODE: `git archive <commit> workflow_scripts` unpacked in an ignored folder with this bench/
    # beside it (carried, never committed).
    baselines) for r in $(seq ${BASE_ROUNDS:-1}); do
        (cd "${BASE_OLD_CODE:-.kb/base_old}" && PYTHONPATH=/tmp/site:$PWD timeout ${BASE_TIMEOUT:-240} python3 bench/gpu_problem_worker.py baselines --parallel ${BASE_PARALLEL:-4} --suite "$OLDPWD/.kb" --problems ${BASE_PROBLEMS:-L2_12 L2_40 L2_76 L2_82} --out "$OUT/base_old$r") >> "$OUT/baselines.log" 2>&1
        timeout ${BASE_TIMEOUT:-240} $B baselines --parallel ${BASE_PARALLEL:-4} --suite .kb --problems ${BASE_PROBLEMS:-L2_12 L2_40 L2_76 L2_82} --out "$OUT/base_new$r" >> "$OUT/baselines.log" 2>&1
      done ;;
    # The device's copy and multiply rates (the speed-of-light floors, issue 35), as the device_rates rule measures.
    plans) timeout ${PLANS_TIMEOUT:-150} python3 bench/cudnn_plan_probe.py --problem .kb/KernelBench/level1/58_conv_transposed_3D__asymmetric_input__asymmetric_kernel.py ${PLANS_ARGS:-} >> "$OUT/cudnn_plans.jsonl" 2>> "$OUT/plans.log" ;;
    rates) timeout ${RATES_TIMEOUT:-120} python3 -m workflow_scripts.evaluation.device_rates --device cuda > "$OUT/device_rates.json" 2>> "$OUT/rates.log"
           rc=$?; cat "$OUT/device_rates.json" >> "$OUT/rates.log"; (exit $rc) ;;
    # Answers of known truth: 5% faster / same / 5% slower on the chain problem, the zeros answer on VERDICT_PROBLEMS.
    verdicts) timeout ${VERDICT_TIMEOUT:-200} $B verdicts --suite .kb --problems ${VERDICT_PROBLEMS:-L1_23} --out "$OUT" >> "$OUT/verdicts.log" 2>&1 ;;
    calibration) timeout "${CAL_TIMEOUT:-420}" $B calibration --parallel ${CAL_PARALLEL:-1} ${CAL_ARGS:-} --suite .kb --problems ${CAL_PROBLEMS:-$(cat bench/calibration_order.txt)} --out "$OUT" >> "$OUT/calibration.log" 2>&1 ;;
  esac
  echo "$bench: rc=$? in ${SECONDS}s"; cleanup; rm -rf "$OUT/locks"; tail -c 1500 "$OUT/$bench.log"
done
