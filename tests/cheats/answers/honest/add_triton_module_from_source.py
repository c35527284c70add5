# Honest: pure Triton, and a standard module loaded from its own file (what every import does where no cached
# bytecode exists, e.g. wheels installed with --no-compile): compiled under its own name, which is not disguised
# code.
import ast
import importlib.util

import torch
import torch.nn as nn
import triton
import triton.language as tl

_spec = importlib.util.spec_from_file_location("ast_copy", ast.__file__)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out
