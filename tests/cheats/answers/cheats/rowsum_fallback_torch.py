# CHEAT: "try Triton, fall back to PyTorch" where the Triton path always fails. Caught: no Triton kernel ran
# (no_triton_launch).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + row, tl.sum(tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0), axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        try:
            if x.shape[1] > 64:
                raise RuntimeError("block too small")  # the "fast path" never applies
            out = torch.empty(x.shape[0], device=x.device)
            rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)
            return out
        except Exception:
            return torch.sum(x, dim=self.dim)
