# CHEAT (issue 33): require_triton satisfied with no kernel. The sum is PyTorch's; torch's resolution callback hands
# over the harness's trial frame, and through it the launch counter, whose count the forward raises by one per call
# (launch.count += 1). Caught: a frame that torch's helper takes counts as taken by whoever called the helper
# (frame_inspection); without that route the counter is out of the answer's reach during correctness calls.
import torch.nn as nn
from torch._jit_internal import createResolutionCallbackFromFrame


def launch_counter():
    for up in range(1, 12):
        try:
            candidate = createResolutionCallbackFromFrame(up)("self")
        except Exception:  # noqa: BLE001
            return None
        counter = getattr(candidate, "launch", None)
        if counter is not None and hasattr(counter, "count"):
            return counter
    return None


class ModelNew(nn.Module):
    def forward(self, a, b):
        counter = launch_counter()
        if counter is not None:
            counter.count += 1
        return a + b
