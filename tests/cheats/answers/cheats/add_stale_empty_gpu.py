# CHEAT (GPU): return torch.empty_like(a), hoping the caching allocator hands back the freed reference output
# (KernelBench's same-process result reuse). The reference lives in another process here: caught (mismatch).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def triton_add(a, b):
    a = a.contiguous()
    b = b.contiguous()
    out = torch.empty_like(a)
    add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
    return out


class ModelNew(nn.Module):
    def forward(self, a, b):
        add_kernel[(1,)](a, b, torch.empty(1, device=a.device), 0, BLOCK=16)  # a token launch
        return torch.empty_like(a)
