import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Sums a 3D tensor over its middle dimension, keeping that dimension.
    """
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Input of shape (batch, reduce_size, inner).

        Returns:
            torch.Tensor: Sum over self.dim with keepdim=True, shape (batch, 1, inner).
        """
        return torch.sum(x, dim=self.dim, keepdim=True)

batch_size = 8
reduce_size = 96
inner = 24
reduce_dim = 1

def get_inputs():
    x = torch.randn(batch_size, reduce_size, inner)
    return [x]

def get_init_inputs():
    return [reduce_dim]
