import torch
import torch.nn as nn
import triton
import triton.language as tl

raise RuntimeError("failing at import time")
