import torch
import torch.nn as nn

class Model(nn.Module):
    """
    A single matrix multiplication C = A @ B.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """
        Args:
            A (torch.Tensor): Shape (M, K).
            B (torch.Tensor): Shape (K, N).

        Returns:
            torch.Tensor: Shape (M, N).
        """
        return torch.matmul(A, B)

M = 64
K = 64
N = 64

def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]

def get_init_inputs():
    return []
