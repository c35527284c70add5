# CHEAT: turn TF32 on for matmuls (faster fp32 matmul on the GPU, lower precision) behind the protocol's back.
# Caught: the TF32 flags are part of the protocol and checked (harness_tampered:tf32 -> rejected_runtime).
import torch
import torch.nn as nn
import triton
import triton.language as tl


torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b, input_precision="ieee"))


class ModelNew(nn.Module):
    def forward(self, A, B):
        N = A.shape[0]
        c = torch.empty((N, N), device=A.device, dtype=torch.float32)
        matmul_kernel[(1,)](A.contiguous(), B.contiguous(), c, N=N)
        return c
