import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """
    A 3x3 convolution without padding followed by SiLU (x * sigmoid(x)).
    """
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Shape (batch, in_channels, height, width).

        Returns:
            torch.Tensor: Shape (batch, out_channels, height - kernel_size + 1, width - kernel_size + 1).
        """
        x = self.conv(x)
        return F.silu(x)

batch_size = 2
in_channels = 3
out_channels = 8
height = 12
width = 12
kernel_size = 3

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
