# Honest hybrid: the addition in Triton, followed by a PyTorch no-op-in-value reshape round trip.
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
        a2 = a.reshape(-1).contiguous()
        b2 = b.reshape(-1).contiguous()
        out = torch.empty_like(a2)
        add_kernel[(triton.cdiv(a2.numel(), 1024),)](a2, b2, out, a2.numel(), BLOCK=1024)
        return out.view(a.shape)
