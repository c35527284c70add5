import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies two tensors elementwise."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b


def get_inputs():
    # two small random inputs of the same shape
    a = torch.randn(4, 256)
    b = torch.randn(4, 256)
    return [a, b]


def get_init_inputs():
    # this model takes no constructor arguments
    return []
