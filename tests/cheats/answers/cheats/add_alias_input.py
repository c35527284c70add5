# CHEAT: compute in place into the first input and return it (a view/alias of the input; no output buffer).
# Caught: inputs_mutated + output_aliases_input (rejected_runtime).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_inplace_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, a, b):
        add_inplace_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, a.numel(), BLOCK=2048)
        return a.view(a.shape)
