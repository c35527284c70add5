import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Softmax over the last dimension of a 2D tensor.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Input of shape (rows, cols).

        Returns:
            torch.Tensor: Softmax over dim=1, same shape as x.
        """
        return torch.softmax(x, dim=1)

rows = 16
cols = 300

def get_inputs():
    x = torch.randn(rows, cols) * 4.0
    return [x]

def get_init_inputs():
    return []
