"""Rule repair_store: verify the store, then rewrite edited or hard-linked result files from their objects and
corrupt objects from intact copies, and drop what cannot be restored (with the results made from it), so that the
next run recomputes exactly that (--params '{"repair": true}'; Store.verify)."""

from __future__ import annotations

from workflow_scripts.stages.verify_store import run


def main(argv: list[str] | None = None) -> int:
    return run(argv, "workflow_scripts.stages.repair_store", __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
