# CHEAT (issue 33): a cache keyed on the input values. Each new pair of inputs costs the full work (a sleep stands
# for a slow kernel); values seen before get the stored output back through a Triton copy, so every call launches a
# kernel and every output is right. KernelBench times one set of inputs over and over: every timed call but the
# first is a hit, and the answer is credited with the copy's time. Neutralised when every timed call draws inputs of
# its own: no call is a hit, and the answer is timed at its real cost (tests/test_cheats.py checks the median).
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

SLOW_KERNEL_S = 0.05


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def copy_kernel(src_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cache = {}

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        key = (float(a.sum()), float(b.sum()), float(a.reshape(-1)[0]), float(b.reshape(-1)[-1]))
        out = torch.empty_like(a)
        n = a.numel()
        if key in self.cache:
            copy_kernel[(triton.cdiv(n, 2048),)](self.cache[key], out, n, BLOCK_SIZE=2048)
            return out
        time.sleep(SLOW_KERNEL_S)
        add_kernel[(triton.cdiv(n, 2048),)](a, b, out, n, BLOCK_SIZE=2048)
        self.cache[key] = out.clone()
        return out
