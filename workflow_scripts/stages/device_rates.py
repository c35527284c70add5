"""Rule device_rates: what the run's device does at best (copy bandwidth over a ladder of sizes, multiply rates per
precision), measured once per environment and kept in the store under the environment's key; every problem's
speed-of-light floor comes from it (scoring/speed_of_light.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import code_version
from workflow_scripts.evaluation.device_rates import measure_device_rates
from workflow_scripts.evaluation.jobs import environment_key, run_settings, store_measurement

STAGE = "device_rates"


@dataclass(frozen=True)
class Params:
    """config["evaluation"]'s device and TF32 mode (the store key's params, beside the environment) and the GPUs a
    job may lease."""

    device: Literal["cpu", "cuda"]
    tf32: Literal["pytorch_default", "ieee"] = "pytorch_default"
    gpus: list[str | int] | None = None


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.device_rates", Params)
    parser.add_argument("--environment", type=Path, required=True, help="<results>/environment/<device>.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--lock-dir", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    run = run_settings(asdict(params), args.lock_dir)  # the GPUs as strings, this host's lock folder
    computed = store_measurement(
        args.store, args.out, STAGE, code_version(__spec__.name), params,
        {"environment": environment_key(args.environment)}, args.environment,
        lambda: measure_device_rates(params.device, params.tf32, run["gpus"], run["lock_dir"]).to_dict())
    print(f"device rates {'measured' if computed else 'reused from the store'}: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
