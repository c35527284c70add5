import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """
    Applies the tanh approximation of GELU elementwise.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Input tensor of any shape.

        Returns:
            torch.Tensor: GELU(x) with approximate='tanh', same shape as x.
        """
        return F.gelu(x, approximate="tanh")

batch_size = 8
features = 512

def get_inputs():
    x = torch.randn(batch_size, features) * 3.0
    return [x]

def get_init_inputs():
    return []
