"""Rule model_rows: one model's branch on its own (<results>/models/<model>.parquet): the collect stage's rows and
flags for that model only, so targeting one model builds nothing of the others."""

from __future__ import annotations

from workflow_scripts.stages.collect import run


def main(argv: list[str] | None = None) -> int:
    return run(argv, "workflow_scripts.stages.model_rows", __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
