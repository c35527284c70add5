"""Environment fingerprint: what a timing depends on.

``fingerprint(device, gpu_index)`` never initialises CUDA in the calling process (the evaluation parent must stay
free of GPU state): GPU facts come from ``nvidia-smi``; where it is missing they come from a short child process
that asks ``torch.cuda.get_device_properties``. ``fingerprint_key(fp)`` hashes only the fields that should
invalidate cached timings (software versions, GPU model, driver, CPU model, device, TF32 mode); it leaves out
readings (the SM clock), identities of one card (uuid, index) and the host name.

CLI: ``python -m workflow_scripts.evaluation.environment --device cpu|cuda [--gpu-index N] [--out FP.json]``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

# Fields that invalidate timings when they change (see the module docstring).
KEY_FIELDS: tuple[str, ...] = (
    "device",
    "python",
    "torch",
    "triton",
    "cuda",
    "driver",
    "gpu_name",
    "gpu_memory_mib",
    "cpu_model",
    "system",
    "machine",
    "tf32_mode",
)

TF32_MODES = ("pytorch_default", "ieee")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _torch_cuda_version() -> str | None:
    # torch.version.cuda does not initialise CUDA; importing torch is fine in the parent.
    try:
        import torch

        return torch.version.cuda
    except Exception:  # noqa: BLE001 - a fingerprint must never fail
        return None


def nvidia_smi_query(fields: list[str], gpu: str | int | None = None, timeout_s: float = 20.0) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-gpu=...`` (one dict per GPU), [] where nvidia-smi is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    cmd = [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    if gpu is not None:
        cmd += ["-i", str(gpu)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        if len(vals) == len(fields):
            rows.append(dict(zip(fields, vals)))
    return rows


@functools.cache
def _nvml() -> Any:
    """NVML (nvidia-ml-py), initialised once per process: a clock reading is then an ioctl, where each nvidia-smi
    run starts a process and initialises NVML again (tens to hundreds of milliseconds, twice per answer). None
    where the bindings or the driver are missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - ImportError, or NVMLError without a driver: nvidia-smi's turn
        return None


def _nvml_handle(nvml: Any, gpu: str | int | None) -> Any:
    """NVML's handle of one GPU: its index in PCI bus order (as nvidia-smi counts; None: the first) or its UUID."""
    name = "" if gpu is None else str(gpu)
    if name.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(name)
    return nvml.nvmlDeviceGetHandleByIndex(int(name or 0))


def sample_sm_clock(gpu: str | int | None) -> float | None:
    """The SM clock (MHz) of one GPU right now (``gpu``: its index in PCI bus order, as nvidia-smi counts, or its
    UUID; None: the first GPU), from NVML, else from nvidia-smi. Call it around timing, not while it runs
    (nvidia-smi stalls CUDA calls on that GPU)."""
    nvml = _nvml()
    if nvml is not None:
        try:
            return float(nvml.nvmlDeviceGetClockInfo(_nvml_handle(nvml, gpu), nvml.NVML_CLOCK_SM))
        except (nvml.NVMLError, ValueError):
            pass
    rows = nvidia_smi_query(["clocks.sm"], gpu, timeout_s=10.0)
    try:
        return float(rows[0]["clocks.sm"]) if rows else None
    except (KeyError, ValueError):
        return None


@functools.cache
def gpu_memory_gib(gpu: str | int | None) -> float | None:
    """The total memory (GiB) of one GPU (its index in PCI bus order, or its UUID), from NVML, else nvidia-smi; None
    where neither answers (memory admission then admits every job)."""
    nvml = _nvml()
    if nvml is not None:
        try:
            return nvml.nvmlDeviceGetMemoryInfo(_nvml_handle(nvml, gpu)).total / (1 << 30)
        except (nvml.NVMLError, ValueError):
            pass
    rows = nvidia_smi_query(["memory.total"], gpu, timeout_s=10.0)
    try:
        return float(rows[0]["memory.total"].split()[0]) / 1024 if rows else None  # MiB
    except (KeyError, ValueError, IndexError):
        return None


def _gpu_facts_from_child(gpu: str | int | None) -> dict[str, Any]:
    # Fallback without nvidia-smi: ask torch in a throw-away process so this process stays CUDA-free.
    code = (
        "import json, torch\n"
        "p = torch.cuda.get_device_properties(0)\n"
        "print(json.dumps({'gpu_name': p.name, 'gpu_uuid': str(getattr(p, 'uuid', '')) or None,"
        " 'gpu_memory_mib': int(p.total_memory // (1 << 20))}))\n"
    )
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}


def tf32_flags_for_mode(mode: str) -> dict[str, Any]:
    """The flags a TF32 protocol mode sets ("pytorch_default" leaves PyTorch's defaults; values are then read
    in the evaluation child and recorded as measured)."""
    if mode not in TF32_MODES:
        raise ValueError(f"tf32 mode must be one of {TF32_MODES}, got {mode!r}")
    if mode == "ieee":
        return {"mode": mode, "cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": False,
                "float32_matmul_precision": "highest"}
    return {"mode": mode}


def configure_tf32(mode: str) -> dict[str, Any]:
    """Set this process's TF32 flags for a protocol mode (imports torch) and return them as read back: what the
    trusted side and every child record as measured."""
    import torch

    if mode == "ieee":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    elif mode not in TF32_MODES:
        raise ValueError(f"unknown tf32 mode {mode!r}")
    flags: dict[str, Any] = {
        "mode": mode,
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": str(torch.get_float32_matmul_precision()),
    }
    for name, get in (("cuda_matmul_fp32_precision", lambda: torch.backends.cuda.matmul.fp32_precision),
                      ("cudnn_conv_fp32_precision", lambda: torch.backends.cudnn.conv.fp32_precision)):
        try:
            flags[name] = str(get())
        except Exception:  # noqa: BLE001 - older/newer torch may lack the new API
            pass
    return flags


def fingerprint(
    device: str,
    gpu_index: int | str | None = None,
    tf32_mode: str = "pytorch_default",
    tf32_flags: dict[str, Any] | None = None,
    sm_clock_mhz: float | None = None,
) -> dict[str, Any]:
    """The environment a timing was taken in. ``tf32_flags`` are the flags the child read after configuring
    (defaults to what the mode sets); ``sm_clock_mhz`` is a reading taken while timing ran (None on CPU)."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    fp: dict[str, Any] = {
        "device": device,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "torch": _version("torch"),
        "triton": _version("triton"),
        "numpy": _version("numpy"),
        "cuda": _torch_cuda_version(),
        "driver": None,
        "gpu_name": None,
        "gpu_uuid": None,
        "gpu_index": None if gpu_index is None else str(gpu_index),
        "gpu_memory_mib": None,
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "system": platform.system(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "tf32_mode": tf32_mode,
        "tf32": dict(tf32_flags) if tf32_flags is not None else tf32_flags_for_mode(tf32_mode),
        "sm_clock_mhz": sm_clock_mhz if device == "cuda" else None,
    }
    if device == "cuda":
        rows = nvidia_smi_query(["name", "uuid", "driver_version", "memory.total"], gpu_index)
        if rows:
            r = rows[0]
            fp["gpu_name"], fp["gpu_uuid"], fp["driver"] = r.get("name"), r.get("uuid"), r.get("driver_version")
            try:
                fp["gpu_memory_mib"] = int(float(r.get("memory.total", "")))
            except ValueError:
                pass
        else:
            fp.update({k: v for k, v in _gpu_facts_from_child(gpu_index).items() if v is not None})
    return fp


def live_facts(device: str) -> dict[str, str | None]:
    """The timing-relevant facts that are cheap to read at workflow parse time: Python, torch and Triton from package
    metadata and, on CUDA, the GPU name and driver from one nvidia-smi query. The workflow passes them to the
    environment rule as a parameter, so Snakemake re-measures the fingerprint (and every timing is re-keyed) when
    one of them changes. A fact not visible here (e.g. torch under --sdm conda) is None."""
    facts: dict[str, str | None] = {"python": platform.python_version(), "torch": _version("torch"),
                                    "triton": _version("triton")}
    if device == "cuda":
        rows = nvidia_smi_query(["name", "driver_version"])
        facts["gpu_name"] = rows[0].get("name") if rows else None
        facts["driver"] = rows[0].get("driver_version") if rows else None
    return facts


def fingerprint_key(fp: dict[str, Any]) -> str:
    """sha256 over the timing-relevant fields only (``KEY_FIELDS``), stable across runs and hosts with the same
    hardware and software."""
    stable = {k: fp.get(k) for k in KEY_FIELDS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
