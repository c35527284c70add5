"""`python -m workflow_scripts evaluate`: the by-hand command line of evaluation/answer."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workflow_scripts.evaluation import environment
from workflow_scripts.evaluation.isolation import BWRAP_ENV, ISOLATION_MODES
from workflow_scripts.evaluation.answer import EvalConfig, InfrastructureError, evaluate_answer
from workflow_scripts.evaluation.config import given
from workflow_scripts.core.io import write_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workflow_scripts evaluate", description="Evaluate one answer (ModelNew) against one KernelBench problem.")
    ap.add_argument("--problem", type=Path, required=True)
    ap.add_argument("--answer", type=Path, required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=None, help="seconds for the whole evaluation")
    ap.add_argument("--no-require-triton", action="store_true", help="calibration: allow answers without Triton")
    ap.add_argument("--tf32", choices=list(environment.TF32_MODES), default=None)
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--gpu-index", type=int, default=None)
    ap.add_argument("--timing-trials", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--correctness-trials", type=int, default=None)
    ap.add_argument("--hidden-seed", type=int, action="append", default=None, help="replay a run's hidden seed")
    ap.add_argument("--timing-seed", type=int, default=None)
    ap.add_argument("--post-timing-seed", type=int, default=None)
    ap.add_argument("--isolation", choices=list(ISOLATION_MODES), default=None)
    ap.add_argument("--bwrap", default=None, help=f"a bubblewrap binary (default: ${BWRAP_ENV}, then PATH)")
    ap.add_argument("--lock-dir", default=None)
    ap.add_argument("--keep-workdir", action="store_true")
    ap.epilog = "Settings left out take the protocol's defaults (workflow_scripts/evaluation/config.py)."
    a = ap.parse_args(argv)
    cfg = EvalConfig(**given(
        device=a.device, gpu_index=a.gpu_index, timeout_s=a.timeout, require_triton=not a.no_require_triton,
        tf32=a.tf32, time_answer=not a.no_timing, timing_trials=a.timing_trials, warmup=a.warmup,
        correctness_trials=a.correctness_trials, hidden_seeds=a.hidden_seed, timing_seed=a.timing_seed,
        post_timing_seed=a.post_timing_seed, isolation=a.isolation, bwrap=a.bwrap, lock_dir=a.lock_dir,
        keep_workdir=a.keep_workdir,
    ))
    try:
        res = evaluate_answer(a.problem, a.answer, cfg)
    except InfrastructureError as e:
        print(f"evaluation could not run: {e}", file=sys.stderr)
        return 2
    write_json(a.out, res.to_dict())
    print(f"{a.answer}: {res.status}" + (f" {res.runtime_ms:.4g} ms" if res.runtime_ms else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
