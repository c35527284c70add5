"""Environment fingerprint and its timing key."""

from __future__ import annotations

import json

import pytest

from workflow_scripts.evaluation import environment
from workflow_scripts.evaluation.environment import fingerprint, fingerprint_key
from workflow_scripts.tools import environment as environment_tool


def test_cpu_fingerprint_fields() -> None:
    fp = fingerprint("cpu")
    for k in ("python", "torch", "triton", "cuda", "driver", "gpu_name", "gpu_uuid", "cpu_model", "tf32",
              "sm_clock_mhz", "platform", "device"):
        assert k in fp
    assert fp["device"] == "cpu" and fp["torch"].startswith("2.") and fp["triton"]
    assert fp["sm_clock_mhz"] is None and fp["gpu_name"] is None
    assert fp["cpu_model"]
    json.dumps(fp)


def test_key_is_stable_and_ignores_readings() -> None:
    a = fingerprint("cpu")
    b = fingerprint("cpu")
    assert fingerprint_key(a) == fingerprint_key(b)
    c = dict(a, sm_clock_mhz=1980.0, hostname="elsewhere", gpu_uuid="GPU-x", gpu_index="3", cpu_count=128)
    assert fingerprint_key(c) == fingerprint_key(a)
    for field, value in (("torch", "9.9"), ("tf32_mode", "ieee"), ("gpu_name", "NVIDIA H200"), ("driver", "1"),
                         ("device", "cuda"), ("cpu_model", "other")):
        assert fingerprint_key(dict(a, **{field: value})) != fingerprint_key(a), field


def test_tf32_modes() -> None:
    assert fingerprint("cpu", tf32_mode="ieee")["tf32"]["cuda_matmul_allow_tf32"] is False
    assert fingerprint("cpu")["tf32"] == {"mode": "pytorch_default"}
    with pytest.raises(ValueError):
        environment.tf32_flags_for_mode("fast")
    flags = {"mode": "pytorch_default", "cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": True}
    assert fingerprint("cpu", tf32_flags=flags)["tf32"] == flags


def test_cuda_fingerprint_from_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake(fields, gpu=None, timeout_s=20.0):
        calls.append((tuple(fields), gpu))
        row = {"name": "NVIDIA H200", "uuid": "GPU-1234", "driver_version": "580.159.04", "memory.total": "143771",
               "clocks.sm": "1980"}
        return [{f: row[f] for f in fields}]

    monkeypatch.setattr(environment, "nvidia_smi_query", fake)
    monkeypatch.setattr(environment, "_nvml", lambda: None)  # no NVML: the clock from nvidia-smi too
    fp = fingerprint("cuda", gpu_index=3, sm_clock_mhz=environment.sample_sm_clock(3))
    assert fp["gpu_name"] == "NVIDIA H200" and fp["gpu_uuid"] == "GPU-1234" and fp["driver"] == "580.159.04"
    assert fp["gpu_memory_mib"] == 143771 and fp["gpu_index"] == "3" and fp["sm_clock_mhz"] == 1980.0
    assert all(g == 3 for _, g in calls)


class FakeNvml:
    """NVML's calls as nvidia-ml-py names them, over two GPUs (this machine has no driver to ask)."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    clocks = {"GPU-aaaa": 1980.0, "GPU-bbbb": 1755.0}

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802 - NVML's name
        if index >= len(self.clocks):
            raise self.NVMLError("Invalid Argument")
        return list(self.clocks)[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        if uuid not in self.clocks:
            raise self.NVMLError("Not Found")
        return uuid

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:  # noqa: N802
        assert kind == self.NVML_CLOCK_SM
        return int(self.clocks[handle])


def test_sm_clock_from_nvml_by_index_or_uuid_else_from_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    smi = []
    monkeypatch.setattr(environment, "_nvml", FakeNvml)
    monkeypatch.setattr(environment, "nvidia_smi_query", lambda fields, gpu=None, timeout_s=20.0:
                        smi.append(gpu) or [{"clocks.sm": "1410"}])
    assert environment.sample_sm_clock(None) == 1980.0 and environment.sample_sm_clock("1") == 1755.0
    assert environment.sample_sm_clock("GPU-bbbb") == 1755.0 and environment.sample_sm_clock(0) == 1980.0
    assert smi == []
    # A GPU NVML does not know (or a name it cannot parse) is asked of nvidia-smi, never read as another GPU.
    assert environment.sample_sm_clock("7") == 1410.0 and environment.sample_sm_clock("GPU-cccc") == 1410.0
    assert smi == ["7", "GPU-cccc"]


def test_cuda_fingerprint_without_any_gpu_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "nvidia_smi_query", lambda *a, **k: [])
    monkeypatch.setattr(environment, "_gpu_facts_from_child", lambda gpu: {})
    fp = fingerprint("cuda", 0)
    assert fp["gpu_name"] is None and fingerprint_key(fp)


def test_cli(tmp_path) -> None:
    out = tmp_path / "fp.json"
    assert environment_tool.main(["--device", "cpu", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["key"] == fingerprint_key(d)
