"""`python -m workflow_scripts forget PATH...`: measure (or compute) chosen results anew on the next run.

A rerun alone, even `snakemake --forcerun <rule>`, recomputes nothing: each job finds its answer in the store
under the same key and reuses it. `forget` drops the store objects behind the given result files (files, or
folders such as results/evaluations/<model>) and deletes those files, every other result file made from the same
objects (e.g. another model's identical answer), and the results made from them (rows, summary), with their
manifest entries; the next plain `snakemake --cores all` recomputes exactly the forgotten ones and rebuilds what
reads them. Each dropped object is logged as "forgotten" in the store's events.jsonl. Run it from the workflow
root (the manifest names files from there).

    python -m workflow_scripts forget results/baselines/level1_1.json
    python -m workflow_scripts forget results/evaluations/weak              # one model's evaluations
    python -m workflow_scripts forget results/evaluations/*/level1_1.json   # one problem, every model
    python -m workflow_scripts forget --configfile config/study.yaml --dry-run results/baselines
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from workflow_scripts.core.store import Store

DEFAULT_STORE = "results/.store"  # schemas/config.schema.yaml's default for `store`


def store_of(configfile: Path) -> str:
    """The configuration's `store` (its schema default when the file sets none)."""
    config = yaml.safe_load(configfile.read_text(encoding="utf-8")) if configfile.is_file() else None
    return (config or {}).get("store", DEFAULT_STORE)


def main(argv: list[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts forget", description=doc.splitlines()[0],
                                     epilog="\n".join(doc.splitlines()[2:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="result files, or folders of them")
    parser.add_argument("--configfile", type=Path, default=Path("config.yaml"),
                        help="the configuration whose store to use (default: config.yaml)")
    parser.add_argument("--store", help="the store's root (default: the configuration's `store`)")
    parser.add_argument("--dry-run", action="store_true", help="only list what would be forgotten")
    args = parser.parse_args(argv)
    store = Store(args.store or store_of(args.configfile))
    try:
        forgotten = store.forget(args.paths, dry_run=args.dry_run)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    deleted = "to delete" if args.dry_run else "deleted"
    print(f"{'would forget' if args.dry_run else 'forgot'} {len(forgotten.keys)} stored object(s); "
          f"the result files made from them ({deleted}), recomputed on the next run:")
    for name in forgotten.names:
        print(f"  {name}")
    if forgotten.downstream:
        print(f"results made from those ({deleted}), rebuilt on the next run:")
        for name in forgotten.downstream:
            print(f"  {name}")
    if not args.dry_run:
        print("now run snakemake as before (e.g. snakemake --cores all): no --forcerun is needed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
