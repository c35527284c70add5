import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """
    LayerNorm over the last dimension (with affine weight and bias) followed by exact (erf) GELU.
    """
    def __init__(self, hidden: int):
        super(Model, self).__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden))
            self.norm.bias.add_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Shape (tokens, hidden).

        Returns:
            torch.Tensor: Same shape as x.
        """
        x = self.norm(x)
        return F.gelu(x)

tokens = 16
hidden = 256

def get_inputs():
    return [torch.randn(tokens, hidden) * 2.0 + 0.5]

def get_init_inputs():
    return [hidden]
