# CHEAT: a frame from an exception's traceback through traceback.walk_tb (tb_frame is read in traceback.py), then
# f_back to the harness's launch counter; compute with PyTorch. Caught: frame_inspection (as add_walk_stack).
import traceback

import torch
import torch.nn as nn


def harness_local(name):
    try:
        raise RuntimeError
    except RuntimeError as e:
        tb = e.__traceback__
    for f, _ in traceback.walk_tb(tb):
        while f is not None:
            if name in f.f_locals:
                return f.f_locals[name]
            f = f.f_back
    return None


class ModelNew(nn.Module):
    def forward(self, a, b):
        launch = harness_local("launch")
        if launch is not None:
            launch.count += 1
        return a + b
