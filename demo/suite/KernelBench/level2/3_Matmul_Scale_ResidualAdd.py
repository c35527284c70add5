import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Multiplies two matrices, scales the product by a constant and adds a residual:
    out = (A @ B) * scale + R
    """
    def __init__(self, scale: float):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, A: torch.Tensor, B: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """
        Args:
            A (torch.Tensor): Shape (M, K).
            B (torch.Tensor): Shape (K, N).
            R (torch.Tensor): Residual of shape (M, N).

        Returns:
            torch.Tensor: Shape (M, N).
        """
        y = torch.matmul(A, B)
        y = y * self.scale
        return y + R

M = 48
K = 64
N = 32
scale = 0.125

def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    R = torch.randn(M, N)
    return [A, B, R]

def get_init_inputs():
    return [scale]
