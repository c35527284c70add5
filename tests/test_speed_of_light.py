"""The speed-of-light floor (issue 35): the device's measured rates (evaluation/device_rates.py), each problem's
work (suite/sizes.py: bytes and FLOPs), the floor and the rows' fraction and flag (scoring/speed_of_light.py,
scoring/rows.py), and the stage that keeps the rates in the store per environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from workflow_scripts.core.records import CopyPoint, DeviceRates
from workflow_scripts.evaluation.device_rates import COPY_BYTES, measure_here
from workflow_scripts.scoring.rows import build_row, split_flags
from workflow_scripts.scoring.speed_of_light import (FASTER_THAN_FLOOR_FLAG, FLOOR_MARGIN, ProblemWork, below_floor,
                                                     floor_fraction, floor_ms)
from workflow_scripts.suite.sizes import problem_sizes

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "suite"
GB = 10**9

# A device whose small copies are launch-bound, whose large ones stream at 2 GB/s, which reads alone at 2.5 GB/s,
# and whose multiplies reach 1 TFLOP/s in bfloat16 (the H100 of s22: copies up to 32 MiB 12-14 us, 1 GiB 3.03 TB/s).
RATES = DeviceRates(
    device="cuda",
    copies=[CopyPoint(2 * 10**5, 2 * 10**5 / (1 * GB)),  # launch-bound: 1 GB/s
            CopyPoint(2 * 10**8, 2 * 10**8 / (2 * GB)),
            CopyPoint(2 * 10**9, 2 * 10**9 / (2 * GB))],
    matmul_flops_per_s={"float32": 10**11, "bfloat16": 10**12},
    tf32={}, fingerprint={},
    stream_bytes_per_s={"read": 2.5 * GB, "write": 1.8 * GB},
)


def test_the_bandwidth_is_the_fastest_traffic_measured_anywhere() -> None:
    assert RATES.peak_bytes_per_s == 2.5 * GB  # a read alone beats every copy: a reduction may stream that fast
    copies_only = DeviceRates("cuda", RATES.copies, {}, {}, {})
    assert copies_only.peak_bytes_per_s == 2 * GB  # rates from before reads and writes were measured
    assert DeviceRates("cuda", [], {}, {}, {}).peak_bytes_per_s is None


def test_the_floor_is_the_longer_of_moving_the_bytes_and_doing_the_flops() -> None:
    memory_bound = ProblemWork(bytes_moved=5 * 10**8, flops=0)
    assert floor_ms(memory_bound, RATES) == pytest.approx(1e3 * 5 * 10**8 / (2.5 * GB))  # 200 ms
    compute_bound = ProblemWork(bytes_moved=10**6, flops=10**12)
    assert floor_ms(compute_bound, RATES) == pytest.approx(1e3)  # bfloat16's rate, the fastest measured
    assert floor_ms(ProblemWork(None, 10**12), RATES) is None  # sizes unknown: no floor
    assert floor_ms(memory_bound, None) is None
    assert floor_fraction(200.0, 400.0) == 0.5 and floor_fraction(200.0, None) is None
    assert floor_ms(memory_bound, DeviceRates("cuda", [], {}, {}, {})) is None  # nothing measured: no floor
    # Flagged only beyond the margin: the rates come from PyTorch's kernels, which a tuned kernel may outrun a little
    assert not below_floor(1.0) and not below_floor(1 + FLOOR_MARGIN) and below_floor(1.01 + FLOOR_MARGIN)
    assert not below_floor(None)


def test_problem_work_adds_every_size_and_keeps_unknown_unknown() -> None:
    row = {"input_bytes": 100, "param_bytes": 20, "output_bytes": 50, "flops": 7}
    assert ProblemWork.of(row) == ProblemWork(170, 7)
    assert ProblemWork.of({**row, "param_bytes": pd.NA, "flops": float("nan")}) == ProblemWork(None, None)


def test_a_correct_answer_below_its_floor_is_flagged_and_one_above_is_not() -> None:
    problem = {"level": 1, "problem_id": 1, "problem": "Copy", "sha256": "a" * 64,
               "input_bytes": 3 * 10**8, "param_bytes": 0, "output_bytes": 2 * 10**8, "flops": 0}  # floor 200 ms
    answer = {"completion_tokens": 7, "completion_sha256": "c", "code_sha256": "d", "require_triton": True}
    baseline = {"eager_ms": 300.0, "eager_status": "ok", "compile_status": "error"}

    def row(runtime_ms: float, status: str = "correct") -> dict:
        evaluation = {"status": status, "runtime_ms": runtime_ms, "flags": [], "device": "cuda",
                      "timing_mode": "cuda_events"}
        return build_row("m", problem, answer, {}, evaluation, baseline, "source:" + "e" * 64, RATES)

    honest, close, impossible = row(250.0), row(190.0), row(100.0)
    assert honest["floor_ms"] == pytest.approx(200.0) and honest["floor_fraction"] == pytest.approx(0.8)
    assert FASTER_THAN_FLOOR_FLAG not in split_flags(honest["flag_list"])
    assert FASTER_THAN_FLOOR_FLAG not in split_flags(close["flag_list"])  # 5% under: within the margin
    assert impossible["floor_fraction"] == pytest.approx(2.0)
    assert FASTER_THAN_FLOOR_FLAG in split_flags(impossible["flag_list"])
    assert impossible["status"] == "correct"  # a review flag: the verdict stands
    wrong = row(100.0, status="mismatch")
    assert wrong["floor_ms"] == pytest.approx(200.0) and wrong["floor_fraction"] is None
    assert FASTER_THAN_FLOOR_FLAG not in split_flags(wrong["flag_list"])


def test_problem_flops_count_products_on_the_meta_device() -> None:
    matmul = problem_sizes(DEMO / "KernelBench/level1/6_Matmul.py")
    assert matmul.flops == 2 * 64 * 64 * 64 and matmul.error is None
    assert problem_sizes(DEMO / "KernelBench/level1/1_ScaledAdd.py").flops == 0  # elementwise: no products


def test_the_cpu_measurement_covers_the_ladder_and_every_cpu_precision() -> None:
    measured = measure_here("cpu", "pytorch_default")
    assert [c["bytes_moved"] for c in measured["copies"]] == [2 * size for size in COPY_BYTES["cpu"]]
    assert all(c["seconds"] > 0 for c in measured["copies"])
    assert set(measured["matmul_flops_per_s"]) == {"float32", "bfloat16"}
    assert set(measured["stream_bytes_per_s"]) == {"read", "write"}
    assert all(rate > 0 for rate in measured["stream_bytes_per_s"].values())
    assert all(rate > 0 for rate in measured["matmul_flops_per_s"].values())


def test_the_stage_measures_once_per_environment_and_reuses_the_store(tmp_path: Path) -> None:
    environment = tmp_path / "environment" / "cpu.json"
    subprocess.run([sys.executable, "-m", "workflow_scripts.stages.environment", "--params",
                    json.dumps({"device": "cpu"}), "--out", str(environment)], check=True, cwd=ROOT)
    out = tmp_path / "environment" / "cpu_rates.json"

    def stage() -> str:
        return subprocess.run(
            [sys.executable, "-m", "workflow_scripts.stages.device_rates", "--params", json.dumps({"device": "cpu"}),
             "--environment", str(environment), "--out", str(out), "--store", str(tmp_path / "store"),
             "--lock-dir", str(tmp_path / "locks")], check=True, cwd=ROOT, capture_output=True, text=True).stdout

    assert "measured" in stage()
    rates = DeviceRates.from_dict(json.loads(out.read_text()))
    assert rates.fingerprint["key"] == json.loads(environment.read_text())["key"]
    out.unlink()
    assert "reused from the store" in stage()
    assert DeviceRates.from_dict(json.loads(out.read_text())) == rates
