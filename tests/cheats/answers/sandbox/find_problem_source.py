# SANDBOX: find the problem's own source file on disk (nothing secret is in it, but with it one file passes every
# problem: rebuild the reference model under the same seed and hand back its outputs through a token kernel; see
# cheats/reference_from_disk.py). Correct output only if neither the file nor its folder's contents are visible.
# Template: the test fills in __PROBLEM__.
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

PROBLEM = "__PROBLEM__"


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        folder = os.path.dirname(PROBLEM)
        self.escaped = os.path.exists(PROBLEM) or bool(os.path.isdir(folder) and os.listdir(folder))

    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out + 1 if self.escaped else out
