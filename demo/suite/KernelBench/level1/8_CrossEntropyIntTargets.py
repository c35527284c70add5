import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """
    Mean cross-entropy loss of logits against integer class targets.
    The targets are an int64 tensor and must stay integer.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """
        Args:
            logits (torch.Tensor): Float tensor of shape (batch, num_classes).
            targets (torch.Tensor): Int64 tensor of shape (batch,), values in [0, num_classes).

        Returns:
            torch.Tensor: Scalar (0-dim) mean loss.
        """
        return F.cross_entropy(logits, targets)

batch_size = 32
num_classes = 20

def get_inputs():
    logits = torch.randn(batch_size, num_classes) * 2.0
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]

def get_init_inputs():
    return []
