"""The memory estimate's two bounds on one forward's working set (evaluation/resources.py ``forward_gib``) against the
reference's peak GPU memory measured on an H200 for every KernelBench level-1/2 problem (the anchors): the margin each
bound needs to hold every measured peak, how many problems the traced bound lowers, and what a problem list's jobs
declare with and without the trace.

    python3 bench/forward_bounds.py --kernelbench ../shared/kernelbench \
        --anchors ../shared/anchors/kernelbench_scan_l1_l2_h200.jsonl [--config config/dag_bench.yaml] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from statistics import mean
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere
sys.path.insert(0, str(ROOT / "bench"))

import yaml  # noqa: E402
from project_study import emit  # noqa: E402

from workflow_scripts.evaluation.resources import (GIB, INTERMEDIATES_GIB, TRACED_MARGIN_GIB, Sizes,  # noqa: E402
                                                   baseline_memory, evaluate_memory, forward_gib, sizes_bound_gib,
                                                   sizes_of, traced_bound_gib)
from workflow_scripts.suite.sizes import problem_sizes  # noqa: E402

CUDA = {"device": "cuda", "correctness_trials": 5}


def measured(kernelbench: Path, anchors: Path) -> list[dict]:
    """Per anchored problem the meta device builds: its sizes (GiB), traced peak and measured peak (GiB)."""
    rows = []
    for anchor in map(json.loads, anchors.read_text().splitlines()):
        found = problem_sizes(kernelbench / "KernelBench" / f"level{anchor['level']}" / anchor["name"])
        if found.error:
            print(f"left out: level {anchor['level']} {anchor['name']}: {found.error}", file=sys.stderr)
            continue
        rows.append({"level": anchor["level"], "problem_id": int(anchor["name"].split("_")[0]),
                     "sizes": sizes_of(found), "peak_gib": anchor["peak_GB"] * 1e9 / GIB})
    return rows


def margins(rows: list[dict]) -> dict[str, float | int]:
    """The constant each bound needs to hold every measured peak (its own constant taken out), and where the traced
    bound is the lesser."""
    def needs(bound: Callable[[Sizes], float], constant: float) -> float:
        return round(max(r["peak_gib"] - (bound(r["sizes"]) - constant) for r in rows), 3)

    return {"problems": len(rows),
            "sizes_bound_needs_gib": needs(sizes_bound_gib, INTERMEDIATES_GIB),
            "sizes_bound_has_gib": INTERMEDIATES_GIB,
            "traced_bound_needs_gib": needs(traced_bound_gib, TRACED_MARGIN_GIB),
            "traced_bound_has_gib": TRACED_MARGIN_GIB,
            "traced_is_lesser": sum(traced_bound_gib(r["sizes"]) < sizes_bound_gib(r["sizes"]) for r in rows)}


def declared(rows: list[dict], config: Path) -> dict[str, float]:
    """Mean GiB over the configuration's level-2 problem list: the forward, and a 4-answer evaluate job's and a
    baseline's GPU memory, without and with the traced peak."""
    only = {int(level): set(ids) for level, ids in yaml.safe_load(config.read_text())["suite"]["only"].items()}
    chosen = [r["sizes"] for r in rows if r["problem_id"] in only.get(r["level"], set())]
    untraced = [replace(s, forward_peak_bytes=None) for s in chosen]
    out = {"problems": len(chosen)}
    for name, group in (("untraced", untraced), ("traced", chosen)):
        out[f"forward_gib_{name}"] = round(mean(forward_gib(s) for s in group), 2)
        out[f"evaluate_4_answers_gib_{name}"] = round(mean(evaluate_memory(s, CUDA, 4).gpu_mem_gb for s in group), 2)
        out[f"baseline_gib_{name}"] = round(mean(baseline_memory(s, CUDA).gpu_mem_gb for s in group), 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench", type=Path, required=True)
    parser.add_argument("--anchors", type=Path, required=True)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = measured(args.kernelbench, args.anchors)
    record = {"margins": margins(rows), "declared": declared(rows, args.config) if args.config else {}}
    emit(record, ("margins", "declared"), args.out)


if __name__ == "__main__":
    main()
