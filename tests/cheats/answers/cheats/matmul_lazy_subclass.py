# CHEAT: return a lazy torch.Tensor subclass that computes the real answer only when a checker calls into it
# (__torch_function__). Caught: the output is not exactly torch.Tensor (output_not_plain_tensor).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, BLOCK: tl.constexpr):
    pass


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, a, b):
        t = torch.Tensor._make_subclass(cls, torch.zeros(a.shape[0], b.shape[1], device=a.device))
        t._a, t._b = a, b
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args = [torch.matmul(x._a, x._b) if isinstance(x, Lazy) else x for x in args]
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


class ModelNew(nn.Module):
    def forward(self, A, B):
        noop_kernel[(1,)](A, BLOCK=16)
        return Lazy(A, B)
