# CHEAT (CPU-testable stale memory): compute once into a persistent buffer, then hand the same memory back
# on every later call without recomputing. Caught: trial 2 sees the trial-1 values (mismatch).
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
    def __init__(self):
        super().__init__()
        self.buf = None

    def forward(self, a, b):
        if self.buf is None:
            self.buf = triton_add(a, b)
        else:
            add_kernel[(1,)](a, b, torch.empty(1, device=a.device), 0, BLOCK=16)  # a token launch
        return self.buf
