"""Stages 6-7 as Snakemake jobs: the environment fingerprint, per-problem baselines and per-answer evaluations.

Each job looks its work up in the content-addressed store first and only computes what is missing:

- ``environment``: the fingerprint of the machine the timings come from (written once per results folder; its
  timing-relevant part is in every timing key, so a different GPU, driver, torch or Triton never reuses a
  timing).
- ``baseline``: eager and torch.compile timings for one problem, shared by every model.
- ``answer``: one model's answer to one problem. The key holds the problem's and the code's sha256 but not the
  model's name, so two models with the same answer are evaluated once. Answers without code (no completion, no
  code block) get their failed verdict without running anything.

GPU jobs lock one specific GPU (workflow_scripts.gpu_lock, inside evaluate/baselines); Snakemake only bounds
how many run at once.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.statuses import Status
from workflow_scripts.store import Store, code_version, sha256_file, write_json

EVALUATE_MODULES = ["evaluate", "harness", "timing", "environment", "statuses", "static_analysis"]
BASELINE_MODULES = ["baselines", "evaluate", "harness", "timing", "environment"]  # baselines use evaluate's helpers


def load_answer(answers_parquet: Path, level: int, problem_id: int) -> dict[str, Any]:
    answers = pd.read_parquet(answers_parquet)
    match = answers[(answers["level"] == level) & (answers["problem_id"] == problem_id)]
    if len(match) != 1:
        raise SystemExit(f"error: {answers_parquet} has {len(match)} rows for level {level} problem {problem_id}")
    # Parquet nulls come back as NaN/NA: make them None so "no code" is never mistaken for a value.
    return {k: (None if v is None or (not isinstance(v, (str, bytes, list)) and pd.isna(v)) else v)
            for k, v in match.iloc[0].to_dict().items()}


def failed_without_running(answer: dict[str, Any], device: str) -> dict[str, Any]:
    """The verdict of an answer that has no code to run."""
    status = Status.MISSING_COMPLETION if answer["extract_status"] == "missing_completion" else Status.NO_CODE
    return {
        "status": status.value, "compiled": False, "correct": False, "runtime_ms": None, "runtime_stats": None,
        "max_abs_diff": None, "triton_launches": None, "flags": [], "device": device, "timing_mode": None,
        "error": f"completion status: {answer['completion_status']}" if status is Status.MISSING_COMPLETION
        else "no fenced code block in the completion",
    }


# Settings that say where or how a job runs but cannot change its result: never part of a key.
NOT_IN_KEY = {"gpu_index", "gpus", "lock_dir", "keep_workdir", "hidden_seeds", "timing_seed", "post_timing_seed"}


def key_params(config: Any) -> dict[str, Any]:
    return {k: v for k, v in asdict(config).items() if k not in NOT_IN_KEY}


def environment_job(device: str, tf32: str, out: Path) -> None:
    from workflow_scripts.environment import fingerprint, fingerprint_key

    out.parent.mkdir(parents=True, exist_ok=True)
    recorded = fingerprint(device, tf32_mode=tf32)
    recorded["key"] = fingerprint_key(recorded)
    write_json(out, recorded)


def _environment_key(environment_file: Path) -> str:
    from workflow_scripts.environment import fingerprint_key

    return fingerprint_key(json.loads(environment_file.read_text()))


def check_environment(result: dict[str, Any], expected_key: str, environment_file: Path) -> None:
    """A timing is stored under the recorded environment's key only if it was measured in that environment
    (e.g. a job that landed on another GPU type, or a changed driver, fails here instead of mixing timings)."""
    from workflow_scripts.environment import fingerprint_key

    measured = result.get("fingerprint")
    if measured and fingerprint_key(measured) != expected_key:
        raise SystemExit(
            f"error: this job ran in another environment than {environment_file} records "
            f"(measured {fingerprint_key(measured)[:12]}, recorded {expected_key[:12]}); delete {environment_file} "
            "to re-key the timings for this environment, or run the job where that environment is"
        )


def _placement(settings: dict[str, Any], lock_dir: Path) -> dict[str, Any]:
    """Where a job may run: the configured GPUs (default: every visible one) and the shared lock folder."""
    gpus = settings.pop("gpus", None)
    # Locks name GPUs as the host sees them: one folder per host, so cluster nodes never contend for "gpu0".
    return {"gpus": [str(g) for g in gpus] if gpus else None, "lock_dir": str(lock_dir / socket.gethostname())}


def answer_job(args: argparse.Namespace) -> bool:
    from workflow_scripts.evaluate import EvalConfig, evaluate_answer

    answer = load_answer(args.answers, args.level, args.problem_id)
    settings = json.loads(args.settings)
    placement = _placement(settings, args.lock_dir)
    config = EvalConfig(**settings, **placement)
    if not answer["require_triton"]:
        config = replace(config, require_triton=False)
    inputs = {
        "problem": sha256_file(args.problem),
        # Without code, why there is none determines the verdict (and its message).
        "code": answer["code_sha256"] or f"none:{answer['extract_status']}:{answer['completion_status']}",
        "environment": _environment_key(args.environment),
    }

    def compute(out: dict[str, Path]) -> None:
        if answer["extract_status"] != "ok":
            write_json(out["json"], failed_without_running(answer, config.device))
            return
        # The answer file lives outside the child's working directory; the child copies what it loads.
        with tempfile.TemporaryDirectory(prefix="answer-") as tmp:
            answer_file = Path(tmp) / "answer.py"
            answer_file.write_text(answer["code"], encoding="utf-8")
            result = evaluate_answer(args.problem, answer_file, config).to_dict()
        check_environment(result, inputs["environment"], args.environment)
        write_json(out["json"], result)

    return Store(args.store).build({"json": args.out}, "evaluate", code_version(EVALUATE_MODULES),
                                   key_params(config), inputs, compute)


def baseline_job(args: argparse.Namespace) -> bool:
    from workflow_scripts.baselines import BaselineConfig, measure_baselines

    settings = json.loads(args.settings)
    placement = _placement(settings, args.lock_dir)
    wanted = set(BaselineConfig.__dataclass_fields__)
    settings["timeout_s"] = args.timeout  # baselines have their own limit (max-autotune compiles are slow)
    config = BaselineConfig(**{k: v for k, v in settings.items() if k in wanted}, **placement,
                            compile_mode=args.compile_mode)
    inputs = {"problem": sha256_file(args.problem), "environment": _environment_key(args.environment)}

    def compute(out: dict[str, Path]) -> None:
        result = measure_baselines(args.problem, config).to_dict()
        check_environment(result, inputs["environment"], args.environment)
        write_json(out["json"], result)

    return Store(args.store).build({"json": args.out}, "baselines", code_version(BASELINE_MODULES),
                                   key_params(config), inputs, compute)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.evaluation_jobs", description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("results/.store"))
    parser.add_argument("--lock-dir", type=Path, default=Path("results/.locks"))
    sub = parser.add_subparsers(dest="job", required=True)
    env = sub.add_parser("environment", help="write the environment fingerprint")
    env.add_argument("--device", choices=["cpu", "cuda"], required=True)
    env.add_argument("--tf32", choices=["pytorch_default", "ieee"], default="pytorch_default")
    env.add_argument("--out", type=Path, required=True)
    for name in ("answer", "baseline"):
        job = sub.add_parser(name)
        job.add_argument("--problem", type=Path, required=True, help="the problem's source file")
        job.add_argument("--environment", type=Path, required=True, help="results/environment/<device>.json")
        job.add_argument("--settings", required=True, help="the evaluation settings as JSON (EvalConfig fields)")
        job.add_argument("--out", type=Path, required=True)
        if name == "answer":
            job.add_argument("--answers", type=Path, required=True, help="results/answers/<model>.parquet")
            job.add_argument("--level", type=int, required=True)
            job.add_argument("--problem-id", type=int, required=True)
        else:
            job.add_argument("--compile-mode", default="max-autotune")
            job.add_argument("--timeout", type=float, default=900.0, help="seconds per baseline child")
    args = parser.parse_args(argv)
    if args.job == "environment":
        environment_job(args.device, args.tf32, args.out)
        return 0
    computed = answer_job(args) if args.job == "answer" else baseline_job(args)
    print(f"{args.job} {'computed' if computed else 'reused from the store'}: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
