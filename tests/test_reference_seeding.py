"""The trusted side's seeding (workflow_scripts.evaluation.reference.ReferenceSide.seeding): KernelBench's seed, then
the draws it governs, never interleaved with another thread's, since torch's generators belong to the process."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest
import torch

from workflow_scripts.evaluation import reference

# get_inputs() and the model's weights draw in many small steps and let other threads run between them (as a
# problem's Python code may at any bytecode): unguarded, two sides built at once draw from one generator in turn.
PROBLEM = '''
import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        layers = []
        for _ in range(8):
            layers.append(nn.Linear(n, n))
            time.sleep(0)
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def get_inputs():
    parts = []
    for _ in range(200):
        parts.append(torch.randn(1, 16))
        time.sleep(0)
    return [torch.cat(parts)]


def get_init_inputs():
    return [16]
'''


def _built(problem: Path) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    side = reference.ReferenceSide(problem, 42, "cpu", None, "pytorch_default", timing_seed=1)
    try:
        return side._seeded_inputs(7, "cpu"), [p.detach().clone() for p in side.model.parameters()]
    finally:
        side.close()


def _built_in_threads(problem: Path, count: int) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    results: list = [None] * count
    start = threading.Barrier(count)

    def build(i: int) -> None:
        start.wait()
        results[i] = _built(problem)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_sides_built_in_threads_at_once_get_the_seeded_inputs_and_weights_of_one_built_alone(tmp_path: Path) -> None:
    problem = tmp_path / "1_Interleaving.py"
    problem.write_text(PROBLEM)
    alone_inputs, alone_weights = _built(problem)
    for inputs, weights in _built_in_threads(problem, 3):
        assert _same(inputs, alone_inputs) and _same(weights, alone_weights)


def test_without_the_guard_the_same_sides_do_interleave(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What the guard prevents happens with this problem: the test above can fail.
    problem = tmp_path / "1_Interleaving.py"
    problem.write_text(PROBLEM)
    alone_inputs, alone_weights = _built(problem)
    monkeypatch.setattr(reference, "_SEEDED_DRAWS", contextlib.nullcontext())
    built = _built_in_threads(problem, 3)
    assert not all(_same(i, alone_inputs) and _same(w, alone_weights) for i, w in built)
