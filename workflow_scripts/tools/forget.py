"""`python -m workflow_scripts forget PATH...`: measure (or compute) chosen results anew on the next run.

A rerun alone, even `snakemake --forcerun <rule>`, recomputes nothing: each job finds its answer in the store
under the same key and reuses it. `forget` drops the store objects behind the given result files (files, or
folders such as results/evaluations/<model>) and deletes those files, every other result file made from the same
objects (e.g. another model's identical answer), and the results made from them (rows, summary), with their
manifest entries; the next plain `snakemake --cores all` recomputes exactly the forgotten ones and rebuilds what
reads them. Each dropped object is logged as "forgotten" in the store's events.jsonl. Run it from the workflow
root (the manifest names files from there).

    python -m workflow_scripts forget results/demo/baselines/level1_1.json
    python -m workflow_scripts forget results/demo/evaluations/weak              # one model's evaluations
    python -m workflow_scripts forget results/demo/evaluations/*/level1_1.json   # one problem, every model
    python -m workflow_scripts forget --configfile config/study.yaml --dry-run results/study/baselines
    python -m workflow_scripts forget --configfile config/study.yaml --configfile config/kernelbench_exact.yaml \
        results/study_kernelbench_exact/evaluations     # an overlay: the files merged as Snakemake merges them
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workflow_scripts.core import configuration
from workflow_scripts.core.store import Store


def main(argv: list[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts forget", description=doc.splitlines()[0],
                                     epilog="\n".join(doc.splitlines()[2:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="result files, or folders of them")
    parser.add_argument("--configfile", type=Path, action="append",
                        help="the configuration whose store to use (default: config.yaml; repeat it for an overlay)")
    parser.add_argument("--store", help="the store's root (default: the configuration's, core/configuration.py)")
    parser.add_argument("--dry-run", action="store_true", help="only list what would be forgotten")
    args = parser.parse_args(argv)
    if args.store is None:
        try:
            args.store = configuration.store_dir(configuration.load(args.configfile or [Path("config.yaml")]))
        except configuration.ConfigError as error:
            parser.exit(2, f"error: {error}\n")
    store = Store(args.store)
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
