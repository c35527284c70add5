# A problem and its answers whose true speedups are known by construction (issue 35: "a test answer that is really
# 5% faster gets faster"). The reference adds 0.0 to a 64 MiB tensor CHAIN times, each add a kernel of its own that
# reads and writes the whole tensor (memory-bound, about 35 us on an H200, far above its launch); an answer doing the
# same with n adds takes n/CHAIN of the time and returns the same values, so its true speedup is CHAIN/n: 20/19 =
# 1.053 (faster), 20/20 (same), 20/21 = 0.952 (slower). gpu_problem_worker.py's ``verdicts`` bench writes the answers
# from this file with CHAIN replaced.
import torch
import torch.nn as nn

CHAIN = 20


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(CHAIN):
            x = x + 0.0
        return x


def get_inputs():
    return [torch.randn(1 << 24)]


def get_init_inputs():
    return []
