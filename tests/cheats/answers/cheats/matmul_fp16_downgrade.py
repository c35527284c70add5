# CHEAT: silently compute in fp16 (faster on tensor cores), cast back to fp32. Caught: values differ beyond
# atol=rtol=1e-4 (mismatch).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b, out_dtype=tl.float16))


class ModelNew(nn.Module):
    def forward(self, A, B):
        N = A.shape[0]
        a16 = A.contiguous().half()
        b16 = B.contiguous().half()
        c16 = torch.empty((N, N), device=A.device, dtype=torch.float16)
        matmul_kernel[(1,)](a16, b16, c16, N=N)
        return c16.float()
