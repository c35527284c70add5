import torch
import torch.nn as nn


class Model(nn.Module):
    """Gather with integer indices under a boolean mask; the float input is generated as float64.

    Checks the input processing: floating inputs become float32, integer and bool inputs keep their dtype.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x, idx, mask):
        return torch.where(mask, x[idx], torch.zeros_like(x[idx]))


n = 256


def get_inputs():
    x = torch.rand(n, dtype=torch.float64)
    idx = torch.randint(0, n, (n,), dtype=torch.int32)
    mask = torch.rand(n) > 0.5
    return [x, idx, mask]


def get_init_inputs():
    return []
