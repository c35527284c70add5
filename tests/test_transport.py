"""The memory areas between the trusted side and an answer's process (workflow_scripts.evaluation.transport), and
the trusted side's seeded inputs (reference.py): sealed areas cannot be changed by anyone, forged slots are refused,
values keep their types, and inputs built by parallel helpers are byte for byte the serial ones."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest
import torch

from workflow_scripts.evaluation import reference
from workflow_scripts.evaluation.protocol import kernelbench_trial_seeds
from workflow_scripts.evaluation.transport import Area, Slot, TransportError

DEMO_PROBLEM = Path(__file__).resolve().parents[1] / "demo" / "suite" / "KernelBench" / "level1" / "1_ScaledAdd.py"


def test_a_sealed_area_cannot_be_written_resized_or_mapped_writable() -> None:
    area = Area("t", 1024)
    entries = area.write([torch.arange(8, dtype=torch.float32), 3, (1, [2, 3])])
    area.seal()
    with pytest.raises(PermissionError):
        mmap.mmap(area.fd, area.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    with pytest.raises(PermissionError):
        os.pwrite(area.fd, b"x", 0)
    with pytest.raises(PermissionError):
        os.ftruncate(area.fd, 10)
    tensor, number, nested = area.read(entries, "cpu")
    assert torch.equal(tensor, torch.arange(8, dtype=torch.float32))
    assert number == 3 and nested == (1, [2, 3])  # tuples stay tuples, lists stay lists
    area.close()


@pytest.mark.parametrize("slot, message", [
    ({"offset": 1000, "shape": [8], "dtype": "float32", "nbytes": 32}, "outside"),
    ({"offset": 0, "shape": [8], "dtype": "float32", "nbytes": 31}, "not 8 x 4"),
    ({"offset": 0, "shape": [8], "dtype": "object", "nbytes": 32}, "dtype"),
    ({"offset": -1, "shape": [8], "dtype": "float32", "nbytes": 32}, "offset"),
    ({"offset": 0, "shape": [True], "dtype": "float32", "nbytes": 4}, "shape"),
])
def test_forged_slots_are_refused(slot: dict, message: str) -> None:
    with pytest.raises(TransportError, match=message):
        Slot.from_dict(slot, 1024)


def test_seeded_inputs_from_parallel_helpers_equal_the_serial_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = kernelbench_trial_seeds(42, 3)
    serial = reference.ReferenceSide(DEMO_PROBLEM, 42, "cpu", None, "pytorch_default")
    serial.prepare(seeds, timing=False)
    monkeypatch.setattr(reference, "PARALLEL_INPUTS_MIN_BYTES", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    helpers: list[object] = []
    popen = reference.subprocess.Popen

    def counting_popen(*args: object, **kwargs: object) -> object:
        helpers.append(args)
        return popen(*args, **kwargs)

    monkeypatch.setattr(reference.subprocess, "Popen", counting_popen)
    parallel = reference.ReferenceSide(DEMO_PROBLEM, 42, "cpu", None, "pytorch_default")
    parallel.prepare(seeds, timing=False)
    assert len(helpers) == len(seeds)  # one helper process per seeded trial
    for a, b in zip(serial.seeded, parallel.seeded, strict=True):
        xs = serial.areas[a.area].read(a.entries, "cpu")
        ys = parallel.areas[b.area].read(b.entries, "cpu")
        assert all(torch.equal(x, y) for x, y in zip(xs, ys, strict=True))
        assert all(torch.equal(x, y) for x, y in zip(a.outputs, b.outputs, strict=True))
    serial.close()
    parallel.close()
