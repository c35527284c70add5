import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Attention-style pooling: softmax of scaled scores over the last dimension, then a weighted sum of values.
    out[i] = sum_j softmax(scores[i] / temperature)[j] * values[i, j]
    """
    def __init__(self, temperature: float):
        super(Model, self).__init__()
        self.temperature = temperature

    def forward(self, scores: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """
        Args:
            scores (torch.Tensor): Shape (rows, cols).
            values (torch.Tensor): Shape (rows, cols).

        Returns:
            torch.Tensor: Shape (rows,).
        """
        p = torch.softmax(scores / self.temperature, dim=-1)
        return torch.sum(p * values, dim=-1)

rows = 32
cols = 128
temperature = 0.5

def get_inputs():
    scores = torch.randn(rows, cols)
    values = torch.randn(rows, cols)
    return [scores, values]

def get_init_inputs():
    return [temperature]
