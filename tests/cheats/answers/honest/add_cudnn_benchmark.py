# Honest (with a global tweak): turns on cudnn.benchmark, a common line in generated answers. Not an integrity
# violation (it only tunes the answer's own PyTorch convolutions): correct, with the informational flag
# global_state_changed:cudnn.benchmark.
import torch
import torch.nn as nn
import triton
import triton.language as tl

torch.backends.cudnn.benchmark = True


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out
