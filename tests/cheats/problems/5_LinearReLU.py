import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer followed by ReLU: the answer must build its parameters the same way (seed 42)."""

    def __init__(self, in_features: int, out_features: int):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 16
in_features = 64
out_features = 32


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
