# CHEAT (KernelBench's "partial computation" hack): compute only the first half of the rows.
# Caught: mismatch.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + row, tl.sum(tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0), axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        out = torch.zeros(x.shape[0], device=x.device)
        half = x.shape[0] // 2
        rowsum_kernel[(half,)](x, out, x.shape[1], x.stride(0), BLOCK=256)
        return out
