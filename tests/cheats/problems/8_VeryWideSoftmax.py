import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over 65,536 columns of uniform inputs (as 23_Softmax draws them): every output is under 2.4e-5, below atol=1e-4, so zeros pass KernelBench's check
    (a degenerate problem, as level 1's 23_Softmax with 393,216 columns is on a GPU)."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


rows = 2
cols = 65536


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return []
