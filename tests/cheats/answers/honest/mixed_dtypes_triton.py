# Honest: masked gather in Triton; asserts the harness's input processing (float64 -> float32, int32 and bool kept).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def masked_gather_kernel(x_ptr, idx_ptr, mask_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = offs < n
    idx = tl.load(idx_ptr + offs, mask=valid, other=0)
    keep = tl.load(mask_ptr + offs, mask=valid, other=0) != 0
    vals = tl.load(x_ptr + idx, mask=valid, other=0.0)
    tl.store(out_ptr + offs, tl.where(keep, vals, 0.0), mask=valid)


class ModelNew(nn.Module):
    def forward(self, x, idx, mask):
        assert x.dtype == torch.float32, x.dtype
        assert idx.dtype == torch.int32, idx.dtype
        assert mask.dtype == torch.bool, mask.dtype
        out = torch.empty(idx.shape[0], device=x.device, dtype=x.dtype)
        n = idx.numel()
        masked_gather_kernel[(triton.cdiv(n, 256),)](x, idx, mask.view(torch.uint8), out, n, BLOCK=256)
        return out
