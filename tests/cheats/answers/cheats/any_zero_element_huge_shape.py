# CHEAT (issue 33, denial of service): an output of no element whose shape has strides no tensor can have,
# (0, 2**40, 2**40) with strides 0. It takes no byte of the output area, so it is "written"; the trusted side then
# built a tensor of that shape from the area and its allocation overflowed: the job ended without a result JSON, and
# every companion answer judged in the same job lost its verdict. Caught: shapes and dtypes are compared with the
# reference's before any byte is read (shape_mismatch), a shape whose strides overflow is refused, and whatever
# else the trusted side meets while judging an answer is that answer's own crash.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()

    def forward(self, *args):
        x = args[0].contiguous()
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out.new_empty(0).as_strided((0, 2**40, 2**40), (0, 0, 0))
