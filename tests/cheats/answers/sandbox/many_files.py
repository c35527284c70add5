# SANDBOX: create 100,000 files in the working directory (on a shared /tmp this fills the host's inodes).
# Correct output only if a file-count cap stopped it.
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


def created_all(n: int = 100_000) -> bool:
    os.mkdir("many")
    for i in range(n):
        try:
            os.close(os.open(f"many/{i}", os.O_CREAT | os.O_WRONLY, 0o600))
        except OSError:
            return False
    return True


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.escaped = created_all()

    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out + 1 if self.escaped else out
