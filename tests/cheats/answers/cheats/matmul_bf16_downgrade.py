# CHEAT: silently round the inputs to bf16 before an fp32 Triton matmul. Caught: mismatch.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b, input_precision="ieee"))


class ModelNew(nn.Module):
    def forward(self, A, B):
        N = A.shape[0]
        a = A.to(torch.bfloat16).float().contiguous()
        b = B.to(torch.bfloat16).float().contiguous()
        c = torch.empty((N, N), device=A.device, dtype=torch.float32)
        matmul_kernel[(1,)](a, b, c, N=N)
        return c
