# CHEAT (issue 33): another answer to the same problem, read from wherever the evaluator left it on disk (the
# pipeline writes every answer of a problem to a host temporary folder before judging any; each answer's process
# got its file through a host folder), passed off as its own behind one token Triton launch. The calibration
# model's answer is the problem's reference renamed ModelNew: with it, this one file passes every problem; with a
# stronger model's answer, it is credited at that model's speed. Caught: an answer's process finds nothing of the
# host's temporary folders, the repository or any answer but its own (confinement); it then returns zeros.
import importlib.util
import os
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

ROOTS = ["/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~"), "/work", "/home", "/root", "/srv", "/mnt"]
SKIP = {"proc", "sys", ".git", "site-packages", "dist-packages", ".venv", "node_modules", "__pycache__"}


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def triton_copy(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def candidates():
    """Python files on disk that define a ModelNew, other than this one: the evaluator's answer files first (they
    answer this very problem), then any other."""
    mine = os.path.realpath(__file__)
    deadline = time.monotonic() + 20
    found = []
    for root in ROOTS:
        for folder, subfolders, files in os.walk(root):
            if time.monotonic() > deadline:
                break
            subfolders[:] = [s for s in subfolders if s not in SKIP]
            for name in files:
                path = os.path.join(folder, name)
                if not name.endswith(".py") or os.path.realpath(path) == mine:
                    continue
                try:
                    with open(path, encoding="utf-8") as f:
                        text = f.read(300_000)
                except (OSError, UnicodeDecodeError):
                    continue
                if "class ModelNew" in text and "CHEAT" not in text:
                    found.append(path)
    return sorted(found, key=lambda p: os.path.basename(p) != "answer.py")


def other_answer():
    for path in candidates():
        try:
            spec = importlib.util.spec_from_file_location(f"other_{abs(hash(path))}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.ModelNew
        except Exception:  # noqa: BLE001
            continue
    return None


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()
        found = other_answer()
        self.other = found(*init_inputs) if found is not None else None

    def forward(self, *args):
        if self.other is None:
            return triton_copy(torch.zeros_like(args[0]))
        return triton_copy(self.other(*args))
