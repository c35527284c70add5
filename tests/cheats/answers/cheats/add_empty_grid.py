# CHEAT: a real Triton kernel launched through Triton's own launcher, but over an empty grid (no program runs),
# to meet require_triton; the sum is computed by PyTorch. Caught: no_triton_launch (an empty grid is not a launch).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = a + b
        copy_kernel[(0,)](out, out, out.numel(), BLOCK_SIZE=1024)
        return out
