import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(flag_ptr, x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # The flag is zero and nothing ever writes it: a volatile load the compiler cannot hoist keeps this kernel
    # running until its process is killed.
    while tl.load(flag_ptr, volatile=True) == 0:
        pass
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    """An answer whose kernel never returns (for the watchdog benchmark)."""

    def forward(self, a, b):
        out = torch.empty_like(a)
        flag = torch.zeros(1, dtype=torch.int32, device=a.device)
        n = a.numel()
        spin_kernel[(triton.cdiv(n, 1024),)](flag, a, out, n, BLOCK=1024)
        return out
