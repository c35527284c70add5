import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over the last dimension (a row-sum reduction)."""

    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim)


batch_size = 32
dim_size = 256
reduce_dim = 1


def get_inputs():
    x = torch.randn(batch_size, dim_size)
    return [x]


def get_init_inputs():
    return [reduce_dim]
