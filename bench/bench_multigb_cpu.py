"""CPU stand-in for the multi-GB level-1 problems (issue: evaluator v2, done-when 6): a 512 MiB ReLU.

    PYTHONPATH=. .venv/bin/python bench/bench_multigb_cpu.py [--answers 3] [--mib 512] [--kernelbench-exact]

On the GPU, KernelBench's harness spends most of a multi-GB problem's time building inputs on the CPU, once per answer
(anchors: 65 of 78 s for L1/19); the evaluator builds them once per problem and judges every answer against them.
This bench shows the same effect on the CPU, with the reference as its own answer (``--answers`` copies):

1. ours: ``evaluate_answers`` on all answers at once (one trusted side; children with 1 thread, as configured);
2. a KernelBench-style run per answer: a fresh process doing what ``eval_kernel_against_ref`` does with its defaults
   (seed 42, build both models, KernelBench's 5 trial seeds, per trial ``get_inputs()`` + both forwards +
   ``allclose``; then ``get_inputs()`` again and the answer's timed calls; then, its excessive-speedup check,
   ``get_inputs()`` once more and the reference's timed calls: seven input builds per answer), with 1 thread too.
   Until 2026-12-02 this side built the inputs five times and timed only the answer (numbers before then).

It prints the wall time of each answer; record the numbers in bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answers  # noqa: E402
from workflow_scripts.evaluation.protocol import kernelbench_trial_seeds  # noqa: E402
from workflow_scripts.generation.replay import rename_reference_model  # noqa: E402

PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand({rows}, 1 << 20) - 0.5]


def get_init_inputs():
    return []
"""

# What KernelBench's eval_kernel_against_ref does for one answer, on the CPU, without its GPU-only parts.
KERNELBENCH_STYLE = textwrap.dedent(
    """
    import importlib.util, json, sys, torch
    torch.set_num_threads(1)
    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path); mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod; spec.loader.exec_module(mod); return mod
    ref, new = load("ref", sys.argv[1]), load("new", sys.argv[2])
    seeds, calls = json.loads(sys.argv[3]), int(sys.argv[4])
    torch.manual_seed(42); init = ref.get_init_inputs()
    torch.manual_seed(42); model = ref.Model(*init)
    torch.manual_seed(42); answer = new.ModelNew(*init)
    with torch.no_grad():
        for seed in seeds:
            torch.manual_seed(seed); inputs = [x.float() for x in ref.get_inputs()]
            assert torch.allclose(model(*inputs), answer(*inputs), atol=1e-4, rtol=1e-4)
        del inputs
        for timed in (answer, model):  # the answer's timing, then the excessive-speedup check's reference timing
            torch.manual_seed(42); inputs = [x.float() for x in ref.get_inputs()]
            for _ in range(calls):
                timed(*inputs)
            del inputs
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=3)
    parser.add_argument("--mib", type=int, default=512, help="input size (one float32 tensor)")
    parser.add_argument("--kernelbench-exact", action="store_true",
                        help="the KernelBench-exact configuration (its 5 seeded trials and timing only, as the "
                             "KernelBench-style side does): the design's win without this project's extra checks")
    args = parser.parse_args()
    config = (EvalConfig.kernelbench_exact(device="cpu", run_static=False) if args.kernelbench_exact
              else EvalConfig(device="cpu", require_triton=False, run_static=False))
    protocol = config.timing_protocol()
    calls = protocol.warmup + protocol.discard_first + protocol.trials
    seeds = kernelbench_trial_seeds(config.seed, config.correctness_trials)
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "19_ReLU_standin.py"
        problem.write_text(PROBLEM.format(rows=args.mib // 4))  # rows of 2^20 float32 = 4 MiB each
        answers = []
        for i in range(args.answers):
            path = Path(tmp) / f"answer{i}.py"
            path.write_text(rename_reference_model(problem.read_text()) + f"\n# copy {i}\n")
            answers.append(path)
        t0 = time.perf_counter()
        results = evaluate_answers(problem, answers, config)
        ours_total = time.perf_counter() - t0
        assert all(r.correct for r in results), [r.error for r in results]
        prepare = results[0].phases_s.get("reference_prepare_s", 0.0)
        per_answer = [r.phases_s.get("total_s", 0.0) for r in results]
        print(f"input {args.mib} MiB, {args.answers} answers, {calls} timed calls each, 1 thread per process, "
              f"{'KernelBench-exact' if args.kernelbench_exact else 'default'} configuration")
        print("phases of the last answer (s): " + ", ".join(f"{k} {v:.2f}" for k, v in results[-1].phases_s.items()))
        print(f"ours: {ours_total:.1f} s in all; prepare once {prepare:.1f} s; per answer "
              f"{', '.join(f'{s:.1f}' for s in per_answer)} s; "
              f"first answer with prepare {prepare + per_answer[0]:.1f} s")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        style = []
        for path in answers:
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", KERNELBENCH_STYLE, str(problem), str(path), str(seeds), str(calls)],
                           env=env, check=True)
            style.append(time.perf_counter() - t)
        print(f"KernelBench-style, a process per answer: {', '.join(f'{s:.1f}' for s in style)} s "
              f"({sum(style):.1f} s in all)")
        later = per_answer[1:] or per_answer
        print(f"ratios: first answer (with prepare) / KernelBench-style {(prepare + per_answer[0]) / style[0]:.2f}; "
              f"later answers / KernelBench-style {sum(later) / len(later) / (sum(style) / len(style)):.2f}; "
              f"all answers {ours_total / sum(style):.2f}")


if __name__ == "__main__":
    main()
