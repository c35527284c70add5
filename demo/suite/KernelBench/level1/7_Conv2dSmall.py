import torch
import torch.nn as nn

class Model(nn.Module):
    """
    A small 2D convolution (stride 1, zero padding 1, with bias).
    """
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Shape (batch, in_channels, height, width).

        Returns:
            torch.Tensor: Shape (batch, out_channels, height, width).
        """
        return self.conv(x)

batch_size = 1
in_channels = 4
out_channels = 8
height = 16
width = 16
kernel_size = 3
padding = 1

def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
