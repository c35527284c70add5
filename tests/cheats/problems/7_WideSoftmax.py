import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over wide rows: every output is about 1/4096, so atol=1e-4 leaves a half-precision answer room."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


rows = 4
cols = 4096


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
