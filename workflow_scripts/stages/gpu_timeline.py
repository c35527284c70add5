"""Rule gpu_timeline: the run's GPU timeline (<results>/tables/gpu_timeline.parquet, one row per interval a job
spent on a GPU) and how busy each GPU was (<results>/tables/gpu_usage.parquet), from the lines every job appended to
its host's <results>/.locks/<host>/timeline.jsonl (evaluation/timeline.py), from the latest run's start on (the
workflow's onstart marks it). Runs after the rows, so after every evaluation and baseline of the run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.io import write_parquet
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import Store, code_version
from workflow_scripts.core.records import RUN_START_FILE, TIMELINE_FILE
from workflow_scripts.scoring.gpu_timeline import STEADY_AFTER_S, load_spans, usage

STAGE = "gpu_timeline"


@dataclass(frozen=True)
class Params:
    steady_after_s: float = STEADY_AFTER_S  # the busy share leaves out this much of the run's start


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.gpu_timeline", Params)
    parser.add_argument("--rows", type=Path, required=True, help="<results>/evaluations.parquet (the run's end)")
    parser.add_argument("--locks", type=Path, required=True, help="<results>/.locks: one folder per host")
    parser.add_argument("--timeline", type=Path, required=True, help="<results>/tables/gpu_timeline.parquet")
    parser.add_argument("--usage", type=Path, required=True, help="<results>/tables/gpu_usage.parquet")
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    store = Store(args.store)
    inputs = {"rows": store.check_result(args.rows)}
    inputs.update({f"timeline:{path.parent.name}": sha256_file(path)
                   for path in sorted(args.locks.glob(f"*/{TIMELINE_FILE}"))})
    if (args.locks / RUN_START_FILE).is_file():
        inputs["run_start"] = sha256_file(args.locks / RUN_START_FILE)

    def compute(out: dict[str, Path]) -> None:
        spans = load_spans(args.locks)
        write_parquet(out["timeline"], spans, "gpu_timeline")
        write_parquet(out["usage"], usage(spans, params.steady_after_s), "gpu_usage")

    store.build({"timeline": args.timeline, "usage": args.usage}, STAGE, code_version(__spec__.name), vars(params),
                inputs, compute)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
