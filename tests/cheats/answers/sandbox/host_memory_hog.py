# SANDBOX: take more host memory than the cap allows, where no per-process limit sees it: __HOG_MIB__ MiB in
# processes started through the low-level spawn call (RLIMIT_AS is per process and unset under CUDA), or written
# into memfds that are never mapped (in no process's resident memory). Then compute the right output, slowly: the
# cap must kill the tree before the answer can return. Template: the test fills in __HOW__, __HOG_MIB__, __MARKER__.
import os
import sys
import time
import _posixsubprocess

import torch
import torch.nn as nn
import triton
import triton.language as tl

HOW, HOG_MIB = "__HOW__", __HOG_MIB__
HOG = "import time; chunks = [b'x' * (64 << 20) for _ in range({n})]; time.sleep(120)  # __MARKER__"


def spawn(code: str) -> None:
    r, w = os.pipe()
    exe = sys.executable.encode()
    _posixsubprocess.fork_exec([exe, b"-c", code.encode()], [exe], True, (), None, None, -1, -1, -1, -1, -1, -1,
                               r, w, True, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.read(r, 64)
    os.close(r)


def hog() -> None:
    if HOW == "processes":
        for _ in range(4):  # four processes, a quarter each
            spawn(HOG.format(n=HOG_MIB // 4 // 64))
    else:
        block = b"x" * (64 << 20)
        for i in range(HOG_MIB // 64):
            if i % 8 == 0:  # 512 MiB per memfd: under RLIMIT_FSIZE, which bounds any one file
                HOLD.append(os.memfd_create("hog"))
            os.write(HOLD[-1], block)


HOLD: list[int] = []


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        hog()
        time.sleep(5)  # the cap's poll or the kernel's limit acts meanwhile

    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 2048),)](a, b, out, a.numel(), BLOCK=2048)
        return out
