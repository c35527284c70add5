"""Several samples per problem: pass@k and best-of-k over the models that hold one run's samples (configuration
``summary.samples``: run name -> its sample models, sample 0 first; generation/kernelbench_runs.py imports
KernelBench's run folders that way). Each sample model keeps its own published counts; this is the block beside
them, ``summary.json["samples"]``.

pass@k is the unbiased estimator of Chen et al. (2021), per problem ``1 - C(n-c, k) / C(n, k)`` with n samples of
which c are correct, averaged over the problems; best-of-k counts a problem as fast_1 when any of the first k samples
is (correct and faster than the baseline at the headline threshold), as KernelBench's best-of-k does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import comb
from typing import Any

import numpy as np

from workflow_scripts.scoring import metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of k samples drawn without replacement from n, c of them correct, is."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    return 1.0 - comb(n - c, k) / comb(n, k)


def samples_block(outcomes: Mapping[str, Any], groups: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """For each run in ``groups``: its sample models, n, pass@k for k = 1..n and best-of-k fast_1 counts against
    each baseline (``outcomes``: summary.Outcomes by model, aligned on the same problems)."""
    block: dict[str, Any] = {}
    for run, models in groups.items():
        missing = [m for m in models if m not in outcomes]
        if missing:
            raise ValueError(f"summary.samples {run!r} names models not in the rows: {missing}")
        correct = np.stack([outcomes[m].correct for m in models])  # samples x problems
        n, problems = correct.shape
        counts = correct.sum(axis=0)
        key, threshold = metrics.HEADLINE_THRESHOLD
        entry: dict[str, Any] = {"models": list(models), "n": n, "problems": int(problems),
                                 "pass_at_k": {str(k): float(np.mean([pass_at_k(n, int(c), k) for c in counts]))
                                               for k in range(1, n + 1)}}
        for baseline in metrics.BASELINES:
            fast = np.stack([outcomes[m].fast(baseline, threshold) for m in models])
            entry[f"best_of_k_{metrics.fast_field(baseline, key)}"] = {
                str(k): int(fast[:k].any(axis=0).sum()) for k in range(1, n + 1)}
        block[run] = entry
    return block
