import torch
import torch.nn as nn

class Model(nn.Module):
    """
    RMS normalization over the last dimension with a learned per-feature weight:
    y = x / sqrt(mean(x^2, dim=-1) + eps) * weight
    """
    def __init__(self, hidden: int, eps: float):
        super(Model, self).__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Input of shape (tokens, hidden).

        Returns:
            torch.Tensor: Normalized tensor, same shape as x.
        """
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight

tokens = 16
hidden = 256
eps = 1e-6

def get_inputs():
    x = torch.randn(tokens, hidden)
    return [x]

def get_init_inputs():
    return [hidden, eps]
