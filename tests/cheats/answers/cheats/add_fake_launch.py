# CHEAT: no Triton kernel at all, but bump the launch counter by calling Triton's launch hooks / counting
# machinery directly, then compute with PyTorch. Caught: no_triton_launch (only launches reached through
# Triton's own launcher/grid executor count).
import triton.knobs
import torch
import torch.nn as nn
import triton
import triton.language as tl



class ModelNew(nn.Module):
    def forward(self, a, b):
        try:
            triton.knobs.runtime.launch_enter_hook(None)
        except Exception:
            pass
        return a + b
