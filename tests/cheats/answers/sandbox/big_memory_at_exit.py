# SANDBOX: holds 2 GiB of touched memory (on the GPU where there is one) when its process is killed, and leaves a process behind that holds as
# much: freeing it takes the kernel a while after the sandbox's wrapper is already reaped. The evaluator must not
# return from the kill (and start the next answer beside it) before these processes have exited; on the GPU the same
# wait is for tens of GiB of device memory.
import os
import _posixsubprocess
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HELD = torch.ones(512 << 20, device=DEVICE)  # 2 GiB, every page touched


def spawn_holder() -> None:
    code = f"import torch, time; held = torch.ones(512 << 20, device='{DEVICE}'); time.sleep(60)".encode()
    args = [sys.executable.encode(), b"-c", code]
    r, w = os.pipe()
    _posixsubprocess.fork_exec(args, [args[0]], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w,
                               True, True, -1, None, None, None, -1, None, False)
    os.close(w)
    os.read(r, 64)
    os.close(r)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        spawn_holder()

    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out
