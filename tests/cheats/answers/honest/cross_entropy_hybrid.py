# Honest hybrid: per-row loss (logsumexp - logit[target]) in Triton, the mean in PyTorch.
# Targets arrive as int64 (the harness keeps integer inputs integer).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ce_rows_kernel(logits_ptr, targets_ptr, loss_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(logits_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    m = tl.max(x, axis=0)
    lse = m + tl.log(tl.sum(tl.exp(x - m), axis=0))
    t = tl.load(targets_ptr + row)
    xt = tl.load(logits_ptr + row * stride + t)
    tl.store(loss_ptr + row, lse - xt)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        assert targets.dtype == torch.int64, targets.dtype
        p = predictions.contiguous()
        rows, cols = p.shape
        losses = torch.empty(rows, device=p.device, dtype=torch.float32)
        ce_rows_kernel[(rows,)](p, targets.contiguous(), losses, cols, p.stride(0),
                                BLOCK=triton.next_power_of_2(cols))
        return losses.mean()
