"""`python -m workflow_scripts baseline`: the by-hand command line of evaluation/baseline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workflow_scripts.evaluation import environment
from workflow_scripts.evaluation.isolation import BWRAP_ENV, ISOLATION_MODES
from workflow_scripts.evaluation.baseline import BaselineConfig, measure_baselines
from workflow_scripts.evaluation.config import given
from workflow_scripts.core.io import write_json


def main(argv: list[str] | None = None) -> int:

    ap = argparse.ArgumentParser(prog="python -m workflow_scripts baseline", description="Time the eager and torch.compile baselines of one problem.")
    ap.add_argument("--problem", type=Path, required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=None, help="seconds per baseline child")
    ap.add_argument("--gpu-index", type=int, default=None)
    ap.add_argument("--tf32", choices=list(environment.TF32_MODES), default=None)
    ap.add_argument("--timing-trials", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--compile-mode", default=None)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--isolation", choices=list(ISOLATION_MODES), default=None)
    ap.add_argument("--bwrap", default=None, help=f"a bubblewrap binary (default: ${BWRAP_ENV}, then PATH)")
    ap.add_argument("--lock-dir", default=None)
    ap.add_argument("--compile-cache", default=None,
                    help="a folder where what torch.compile builds persists between runs (default: none)")
    ap.epilog = "Settings left out take the protocol's defaults (workflow_scripts/evaluation/config.py)."
    a = ap.parse_args(argv)
    cfg = BaselineConfig(**given(device=a.device, gpu_index=a.gpu_index, timeout_s=a.timeout, tf32=a.tf32,
                                 timing_trials=a.timing_trials, warmup=a.warmup, compile_mode=a.compile_mode,
                                 run_compile=not a.no_compile, run_eager=not a.no_eager, isolation=a.isolation,
                                 bwrap=a.bwrap, lock_dir=a.lock_dir, compile_cache=a.compile_cache))
    res = measure_baselines(a.problem, cfg)
    write_json(a.out, res.to_dict())
    print(f"{a.problem}: eager {res.eager_status} {res.eager_ms}, compile {res.compile_status} {res.compile_ms} "
          f"(compile {res.compile_time_s}s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
