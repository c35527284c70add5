"""Names of the libraries answers call: which torch / nn / Tensor names allocate, describe or reshape (and so are
not "torch math"), and which resolve as conventional aliases. Pure data, read by the symbol tables and the flow."""

from __future__ import annotations

DEFAULT_ALIASES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "triton": "triton",
                   "tl": "triton.language", "__builtins__": "builtins"}
KERNEL_DECORATORS = {"jit", "autotune", "heuristics"}  # last component under triton.*

# torch.<name> calls that allocate / create / reshape / describe and so are not "torch math".
TORCH_ALLOC_FUNCS = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "range", "linspace", "logspace", "eye", "tensor", "as_tensor", "asarray", "from_numpy",
    "frombuffer", "from_file", "scalar_tensor", "randn", "randn_like", "rand", "rand_like", "randint",
    "randint_like", "randperm", "normal", "empty_permuted",
}
TORCH_LAYOUT_FUNCS = {
    "reshape", "flatten", "unflatten", "permute", "transpose", "t", "squeeze", "unsqueeze", "narrow", "select",
    "split", "tensor_split", "chunk", "unbind", "movedim", "moveaxis", "swapaxes", "swapdims", "as_strided",
    "view_as_real", "view_as_complex", "broadcast_to", "clone", "detach", "adjoint",
}
TORCH_INT_FUNCS = {"numel"}
# torch.ops namespaces that are PyTorch's own kernels; any other namespace was registered by the answer
# (torch.library.custom_op / triton_op around its Triton kernels) and does not count.
TORCH_OPS_NAMESPACES = {"aten", "prims", "quantized", "_quantized", "torchvision", "_c10d_functional", "c10d",
                        "higher_order", "inductor"}
TORCH_SHAPE_FUNCS = {"Size", "broadcast_shapes"}
TORCH_OTHER_FUNCS = {
    "device", "dtype", "finfo", "iinfo", "is_tensor", "is_floating_point", "is_complex", "is_nonzero",
    "result_type", "promote_types", "can_cast", "get_default_dtype", "get_default_device", "Generator", "Stream",
    "Event", "no_grad", "enable_grad", "inference_mode", "set_grad_enabled", "is_grad_enabled",
    "is_inference_mode_enabled", "autocast", "manual_seed", "seed", "initial_seed", "get_rng_state",
    "set_rng_state", "compile", "typename", "is_storage", "Tensor", "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled", "set_printoptions", "get_num_threads", "set_num_threads",
    "set_default_dtype", "set_default_device", "set_float32_matmul_precision", "get_float32_matmul_precision",
    "set_flush_denormal", "_assert", "sym_int", "sym_float", "cond",
}
TORCH_NONOP_PREFIXES = (
    "torch.cuda.", "torch.backends.", "torch.jit.", "torch._dynamo.", "torch._inductor.", "torch.library.",
    "torch.utils.", "torch.testing.", "torch.autograd.", "torch.random.", "torch.distributed.", "torch.profiler.",
    "torch.cpu.", "torch.mps.", "torch.xpu.", "torch.amp.", "torch.types.", "torch.overrides.", "torch.nn.init.",
    "torch.nn.utils.", "torch.nn.parameter.", "torch.accelerator.", "torch.version.", "torch.export.",
    "torch.fx.", "torch.multiprocessing.", "torch.hub.", "torch.onnx.",
)
# nn classes that hold tensors rather than compute.
NN_TENSOR_CLASSES = {"Parameter", "UninitializedParameter", "Buffer", "UninitializedBuffer"}
NN_NONCALLABLE_CONTAINERS = {"torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.ParameterList",
                             "torch.nn.ParameterDict"}
NN_NO_COMPUTE = {"torch.nn.Identity"}
MODULE_NONCOMPUTE_METHODS = {
    "parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children", "modules",
    "named_modules", "state_dict", "load_state_dict", "train", "eval", "to", "cuda", "cpu", "float", "double",
    "half", "bfloat16", "type", "register_buffer", "register_parameter", "register_module", "add_module", "apply",
    "zero_grad", "requires_grad_", "append", "extend", "insert", "keys", "values", "items", "get_submodule",
    "get_parameter", "get_buffer", "extra_repr", "reset_parameters", "flatten_parameters", "_get_name",
    "register_forward_hook", "register_forward_pre_hook", "share_memory", "__len__", "__iter__",
}

# Tensor methods: ints, meta answers, and layout/copy/alloc helpers (none of them counts as math).
TENSOR_INT_METHODS = {"numel", "nelement", "dim", "ndimension", "element_size", "storage_offset", "get_device",
                      "item", "__len__"}
TENSOR_OTHER_METHODS = {"tolist", "numpy", "is_contiguous", "is_floating_point", "is_complex", "is_pinned",
                        "is_shared", "is_set_to", "untyped_storage", "storage", "register_hook", "retain_grad",
                        "dim_order", "is_inference", "data_ptr_", "__repr__", "__str__"}
TENSOR_LAYOUT_METHODS = {
    "view", "view_as", "reshape", "reshape_as", "contiguous", "permute", "transpose", "t", "flatten", "unflatten",
    "expand", "expand_as", "unsqueeze", "squeeze", "narrow", "select", "split", "tensor_split", "chunk", "unbind",
    "movedim", "moveaxis", "swapaxes", "swapdims", "as_strided", "unfold", "to", "type", "type_as", "float",
    "double", "half", "bfloat16", "int", "long", "short", "char", "byte", "bool", "cuda", "cpu", "clone", "detach",
    "detach_", "copy_", "zero_", "fill_", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor",
    "new_empty_strided", "requires_grad_", "pin_memory", "share_memory_", "record_stream", "resize_",
    "resize_as_", "set_", "unsqueeze_", "squeeze_", "t_", "transpose_", "as_subclass", "contiguous_",
    "view_as_real", "view_as_complex", "conj", "resolve_conj", "resolve_neg", "adjoint", "mT", "mH",
}
TENSOR_ALLOC_METHODS = {"new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided"}
# Tensor math method names counted even when the receiver's type is unknown: names no builtin type carries.
TENSOR_MATH_METHODS_STRICT = {
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sum", "mean", "prod", "std", "var",
    "max", "min", "amax", "amin", "argmax", "argmin", "softmax", "log_softmax", "relu", "relu_", "sigmoid",
    "sigmoid_", "tanh", "tanh_", "clamp", "clamp_", "clamp_min", "clamp_max", "clip", "pow", "matmul", "mm",
    "bmm", "addmm", "baddbmm", "norm", "cumsum", "cumprod", "logsumexp", "sin", "cos", "erf", "neg", "reciprocal",
    "square", "mul", "div", "mul_", "div_", "add_", "sub_", "exp_", "masked_fill", "masked_fill_", "floor", "ceil",
    "sign", "topk", "argsort", "outer", "abs", "abs_", "addcmul", "addcdiv", "lerp", "where", "gather", "scatter",
    "scatter_add", "index_select", "einsum", "dot", "mv", "hardtanh", "gelu", "silu", "mish", "softplus",
}
TENSOR_TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "grad", "real", "imag"}
