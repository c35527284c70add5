# CHEAT (GPU): launch the (slow) kernel on a side stream and return without making the current stream wait,
# so events recorded on the current stream miss the work. Caught: the output snapshot taken on the current
# stream differs from the final one (unsynchronized_stream -> rejected_runtime) or is wrong (mismatch).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def slow_add_kernel(x_ptr, y_ptr, out_ptr, n, SPIN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    acc = x * 0.0
    for i in range(SPIN):  # burn time so the current stream finishes first
        acc = acc * 0.5 + 1e-30
    tl.store(out_ptr + offs, x + y + acc * 0.0, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, a, b):
        if self.side is None:
            self.side = torch.cuda.Stream()
        out = torch.empty_like(a)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            slow_add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), SPIN=200000, BLOCK=1024)
        return out
