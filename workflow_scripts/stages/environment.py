"""Rule environment: the fingerprint of the machine the timings come from (GPU, driver, CUDA, torch, Triton,
Python, TF32 mode). Its timing-relevant part keys every timing, so another environment never reuses one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from workflow_scripts.core.io import write_json
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.evaluation.environment import fingerprint, fingerprint_key


@dataclass(frozen=True)
class Params:
    device: Literal["cpu", "cuda"]
    tf32: Literal["pytorch_default", "ieee"] = "pytorch_default"


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.environment", Params)
    parser.add_argument("--out", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    recorded = fingerprint(params.device, tf32_mode=params.tf32)
    recorded["key"] = fingerprint_key(recorded)
    write_json(args.out, recorded)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
