# Probe: fails (runtime_error) unless the process runs in its own user and network namespaces.
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, a, b):
        with open("/proc/self/uid_map") as f:
            assert "4294967295" not in f.read(), "not in a user namespace"
        with open("/proc/self/net/dev") as f:  # the interfaces of this process's network namespace
            ifaces = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
        assert ifaces == ["lo"], f"not in a fresh network namespace: {ifaces}"
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out
