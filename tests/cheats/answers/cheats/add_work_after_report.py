# CHEAT (issue 33): work moved out of the timed window. Each call's output carries a finalizer that prepares the
# next call (a sleep stands for that work: a workspace zeroed, a lookup table rebuilt). The harness drops the output
# after the call was reported, so the work runs between two timed windows: no window holds it, but the trusted side's
# observed interval does. It hides a few milliseconds per call on a GPU (200 ms in the CPU interpreter): inside the
# absolute band (5 ms + 50% of the call on CUDA, 250 ms + 50% on the CPU), outside the relative one (the loop's own
# excess, probed before the answer's first block, + 1 ms + 15% on CUDA, + 50 ms + 30% on the CPU).
import time
import weakref

import torch
import torch.nn as nn
import triton
import triton.language as tl

HIDDEN_S = 0.004 if torch.cuda.is_available() else 0.2


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        add_kernel[(triton.cdiv(n, 2048),)](a, b, out, n, BLOCK_SIZE=2048)
        weakref.finalize(out, time.sleep, HIDDEN_S)
        return out
