import torch
import torch.nn as nn

class Model(nn.Module):
    """
    A linear layer (GEMM with bias) followed by ReLU.
    """
    def __init__(self, in_features: int, out_features: int):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Shape (batch, in_features).

        Returns:
            torch.Tensor: Shape (batch, out_features).
        """
        x = self.linear(x)
        return torch.relu(x)

batch_size = 32
in_features = 64
out_features = 48

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
