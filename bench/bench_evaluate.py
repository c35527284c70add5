"""Cost of one evaluated answer, and of the integrity checks, against a bare KernelBench-style run.

    python bench/bench_evaluate.py [--device cpu|cuda] [--repeats 3]

For an honest answer (tests/cheats: elementwise add, pure Triton) it times, over --repeats runs each:
1. `evaluate_answer` as the pipeline runs it (two isolated children, hidden and post-timing trials, monitors,
   static analysis, network namespace where available);
2. the same without the network namespace and without static analysis (isolation="none", run_static=False);
3. a bare baseline: one fresh interpreter that imports torch and triton, loads both modules from files, builds
   both models, runs 5 correctness trials and the same number of timed calls, KernelBench-style, with none of
   the checks.
and prints the wall time of each and the evaluator's own phase breakdown. Record the numbers in bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answer  # noqa: E402

PROBLEM = ROOT / "tests/cheats/problems/1_ElementwiseAdd.py"
ANSWER = ROOT / "tests/cheats/answers/honest/add_triton.py"

BARE = textwrap.dedent(
    """
    import importlib.util, sys, time, torch
    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path); mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod; spec.loader.exec_module(mod); return mod
    device = sys.argv[3]
    ref, new = load("ref", sys.argv[1]), load("new", sys.argv[2])
    torch.manual_seed(42); model = ref.Model(*ref.get_init_inputs()).to(device)
    torch.manual_seed(42); answer = new.ModelNew(*ref.get_init_inputs()).to(device)
    with torch.no_grad():
        for seed in range(5):
            torch.manual_seed(seed); inputs = [x.to(device) for x in ref.get_inputs()]
            assert torch.allclose(model(*inputs), answer(*inputs), atol=1e-4, rtol=1e-4)
        for _ in range(int(sys.argv[4])):
            answer(*inputs)
    """
)


def wall(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    full = EvalConfig(device=args.device)
    lean = EvalConfig(device=args.device, isolation="none", run_static=False)
    trials = full.timing_protocol().to_dict()
    calls = sum(v for k, v in trials.items() if isinstance(v, int) and k in ("warmup", "discard_first", "trials"))
    env = dict(os.environ, TRITON_INTERPRET="1" if args.device == "cpu" else "0")
    results: dict[str, list[float]] = {"evaluate (full checks)": [], "evaluate (no netns, no static)": [],
                                       "bare KernelBench-style child": []}
    phases = []
    for _ in range(args.repeats):
        result = {}
        results["evaluate (full checks)"].append(wall(lambda result=result: result.update(r=evaluate_answer(PROBLEM, ANSWER, full))))
        assert result["r"].correct, result["r"].error
        phases.append(result["r"].phases_s)
        results["evaluate (no netns, no static)"].append(wall(lambda: evaluate_answer(PROBLEM, ANSWER, lean)))
        bare = [sys.executable, "-c", BARE, str(PROBLEM), str(ANSWER), args.device, str(calls)]
        results["bare KernelBench-style child"].append(wall(lambda bare=bare: subprocess.run(bare, env=env, check=True)))
    for name, values in results.items():
        print(f"{name:34s} median {statistics.median(values):6.2f} s  (runs: {', '.join(f'{v:.2f}' for v in values)})")
    keys = sorted({k for p in phases for k in p})
    print("evaluator phases (median s): " + ", ".join(f"{k} {statistics.median(p.get(k, 0) for p in phases):.3f}" for k in keys))


if __name__ == "__main__":
    main()
