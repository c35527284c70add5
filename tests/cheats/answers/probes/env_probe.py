# Probe (not a cheat): checks, from inside the answer's process, the isolation the harness promises, and
# raises (-> runtime_error) if something is off. Then adds with Triton (-> correct).
import os
import resource
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

ALLOWED_ENV = {"PATH", "HOME", "TMPDIR", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "LANG",
               "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES",
               "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_LIBRARY_PATH", "CUDA_HOME",
               "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH", "NCCL_NVLS_ENABLE",
               "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "LC_CTYPE"}


def check_isolation() -> None:
    cwd = os.path.realpath(os.getcwd())
    extra = set(os.environ) - ALLOWED_ENV
    assert not extra, f"unexpected environment variables: {sorted(extra)}"
    assert os.path.realpath(os.environ["HOME"]) == cwd
    assert os.path.realpath(os.environ["TRITON_CACHE_DIR"]).startswith(cwd)
    assert cwd not in [os.path.realpath(p) for p in sys.path if p], "the answer's folder is on sys.path"
    assert resource.getrlimit(resource.RLIMIT_CORE) == (0, 0)
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[1] != resource.RLIM_INFINITY
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[1] <= 4096
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert resource.getrlimit(resource.RLIMIT_AS)[1] != resource.RLIM_INFINITY
    # In a sandbox the session is led by the init of the child's own PID namespace (1; 0: outside it, unshare),
    # which takes every process of the namespace with it.
    assert os.getsid(0) in (os.getpid(), 0, 1), "not a session leader (its process group could not be killed alone)"


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, a, b):
        check_isolation()
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out
