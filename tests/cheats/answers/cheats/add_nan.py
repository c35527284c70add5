# CHEAT: return NaN everywhere (NaN compares unequal, but a sloppy checker that ignores NaN would pass it).
# Caught: NaN never passes (mismatch).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def nan_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full((BLOCK,), float("nan"), tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        nan_kernel[(triton.cdiv(a.numel(), 2048),)](out, a.numel(), BLOCK=2048)
        return out
