# CHEAT: no frame at all: the launch counter was in the closure of the hook the harness installed into Triton (the
# interpreter's grid executor, or the launch-enter hook chain); bump it in every call, compute with PyTorch.
# Caught: the installed wrappers raise audit events and hold no counter (no_triton_launch).
import torch
import torch.nn as nn
import triton


def installed_counter():
    cands = []
    try:
        from triton.runtime.interpreter import GridExecutor
        cands.append(GridExecutor.__call__)
    except ImportError:
        pass
    hook = triton.knobs.runtime.launch_enter_hook
    cands += list(getattr(hook, "calls", []) or ([hook] if hook else []))
    for fn in cands:
        for cell in getattr(fn, "__closure__", None) or ():
            obj = cell.cell_contents
            if hasattr(obj, "take") and hasattr(obj, "count"):
                return obj
    return None


COUNTER = installed_counter()


class ModelNew(nn.Module):
    def forward(self, a, b):
        if COUNTER is not None:
            COUNTER.count += 1
        return a + b
