"""Rule repair_store: verify the store, then delete corrupt objects and the readable names pointing to them, so
that the next run rebuilds exactly those (--params '{"repair": true}')."""

from __future__ import annotations

from workflow_scripts.stages.verify_store import run


def main(argv: list[str] | None = None) -> int:
    return run(argv, "workflow_scripts.stages.repair_store", __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
