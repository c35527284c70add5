import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Computes out = alpha * a + b elementwise (an axpy with a fixed scalar alpha).
    """
    def __init__(self, alpha: float):
        super(Model, self).__init__()
        self.alpha = alpha

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """
        Args:
            a (torch.Tensor): Tensor of shape (rows, cols).
            b (torch.Tensor): Tensor of the same shape as a.

        Returns:
            torch.Tensor: alpha * a + b, same shape as a.
        """
        return self.alpha * a + b

rows = 16
cols = 256
alpha = 0.75

def get_inputs():
    a = torch.randn(rows, cols)
    b = torch.randn(rows, cols)
    return [a, b]

def get_init_inputs():
    return [alpha]
