import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise addition of two tensors."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


rows = 64
cols = 128


def get_inputs():
    a = torch.rand(rows, cols)
    b = torch.rand(rows, cols)
    return [a, b]


def get_init_inputs():
    return []
