# CHEAT: memoise on the inputs' data_ptr (the same tensors are passed on every timing call). Caught: trials
# whose inputs reuse a freed address get stale values (mismatch), and after timing the same tensors are
# overwritten in place with new values (post_timing_mismatch -> rejected_runtime).
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
        self.cache = {}

    def forward(self, a, b):
        key = (a.data_ptr(), b.data_ptr())
        if key not in self.cache:
            self.cache[key] = triton_add(a, b)
        return self.cache[key].clone()
