# GPU failure: the kernel stores far out of bounds -> an illegal-address CUDA error (sticky: the context is
# unusable afterwards). Expected: crash, never a pass; the next answer runs in a fresh process.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_store_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs.to(tl.int64) * 1000000000000, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        bad_store_kernel[(triton.cdiv(a.numel(), 1024),)](out, a.numel(), BLOCK=1024)
        torch.cuda.synchronize()
        return out
