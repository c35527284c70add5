"""Rule baseline: eager and torch.compile timings of one problem's reference, shared by every model."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.params import parse_params, parse_stage_args, stage_parser
from workflow_scripts.core.store import code_version
from workflow_scripts.evaluation import compile_cache
from workflow_scripts.evaluation.baseline import BaselineConfig, measure_baselines
from workflow_scripts.evaluation.jobs import environment_key, run_settings, store_measurement

STAGE = "baselines"


@dataclass(frozen=True)
class Params:
    evaluation: dict[str, Any]  # config["evaluation"]: the answers' protocol, which the baselines share
    baselines: dict[str, Any]  # config["baselines"]: compile_mode and the per-child timeout_s


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.baseline", Params)
    parser.add_argument("--problem", type=Path, required=True, help="the problem's source file")
    parser.add_argument("--environment", type=Path, required=True, help="<results>/environment/<device>.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--lock-dir", type=Path, required=True)
    parser.add_argument("--compile-threads", type=int, default=None,
                        help="torch.compile's worker processes (the rule's threads); default: the configuration's")
    args, params = parse_stage_args(parser, Params, argv)
    settings = run_settings(params.evaluation, args.lock_dir)
    # Only the protocol fields baselines share with answers (correctness fields such as atol do not apply), and
    # their own limit (max-autotune compiles are slow).
    settings = {k: v for k, v in settings.items() if k in BaselineConfig.__dataclass_fields__}
    baselines = dict(params.baselines)
    # What torch.compile builds persists per environment (evaluation/compile_cache.py), beside the store's objects
    # unless the configuration names another folder.
    caches = Path(baselines.pop("compile_cache_dir", None) or args.store / "caches")
    settings.update(baselines)
    if args.compile_threads is not None:
        settings["compile_threads"] = args.compile_threads
    config = parse_params(BaselineConfig, settings, source="--params baselines")
    environment = environment_key(args.environment)
    config = replace(config, compile_cache=str(caches / compile_cache.folder_name(environment, config.autotune_alone)))
    inputs = {"problem": sha256_file(args.problem), "environment": environment}

    computed = store_measurement(args.store, args.out, STAGE, code_version(__spec__.name), config, inputs,
                                 args.environment, lambda: measure_baselines(args.problem, config).to_dict())
    print(f"baseline {'computed' if computed else 'reused from the store'}: {args.out}"
          + ("" if computed else f" (to measure it anew: python -m workflow_scripts forget {args.out})"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
