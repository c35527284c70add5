"""Static (AST) analysis of an answer's source: what it defines, whether it keeps PyTorch ops, and hack findings.

Everything here works on the ``ast`` of the answer; the answer is never imported and no regular expression
ever looks at its source. Names are resolved through the answer's own imports (``import torch.nn.functional as
F``, ``from torch import nn``, ``from os import system``, module-level aliases such as ``relu = torch.relu``,
``getattr(torch, "relu")``), so ``F.relu`` and ``torch.nn.functional.relu`` are the same thing. Where the answer
never binds them, the conventional names ``torch``, ``nn``, ``F``, ``triton`` and ``tl`` resolve as usual.

Classifications (the fields of ``StaticReport``)
-----------------------------------------------
- ``parses`` / ``syntax_error``: ``ast.parse`` succeeded / its message with the line.
- ``has_model_new``: a top-level ``class ModelNew`` (or a top-level assignment ``ModelNew = ...``).
- ``defines_triton_kernel``: a function decorated with ``triton.jit`` / ``tl.jit`` / ``triton.autotune`` /
  ``triton.heuristics`` (any stack of them, called or not), or bound by ``name = triton.jit(fn)``.
- ``launches_triton_kernel``: a subscript-call ``kernel[grid](...)`` of such a function (by name, by an attribute
  named like it, or through a variable/dict assigned from it) in Python code, i.e. outside ``@triton.jit`` bodies.
- ``keeps_torch_op`` / ``torch_ops_kept``: the published definition, below.
- ``findings``: ``Finding(code, severity, line, message)``; the table further below.

The rule for ``keeps_torch_op`` (published: "forward() still calls a torch layer, functional op, tensor math
method or arithmetic on inputs")
----------------------------------------------------------------------------------------------------------------
The body of ``ModelNew.forward`` is walked statement by statement (both branches of every ``if``, loop bodies,
``try`` bodies and handlers, lambdas and comprehensions) and so is everything it calls *in the same module*,
transitively: module functions, methods of ``ModelNew`` and its module-local base classes (``self.helper(x)``,
``super().forward(x)``), nested functions, local ``nn.Module`` classes held in attributes (their ``forward``),
``torch.autograd.Function`` subclasses (``Fn.apply(...)`` -> ``Fn.forward``), lambdas and module-level objects
(``_act = nn.GELU()`` at top level, then ``_act(x)``). ``@triton.jit`` kernels
are never entered: their ``tl.*`` math is the Triton part. Every one of these counts as a kept op (``torch_ops_kept``
names them, in order of first appearance):

- ``layer:<class>`` - calling an ``nn.*`` module: ``self.conv(x)`` where an attribute was assigned
  ``nn.Conv2d(...)`` (also ``nn.Sequential``, elements of ``nn.ModuleList``, ``self.conv.forward(x)``, other methods
  of such a module, ``nn.ReLU()(x)``). Parameters and buffers (``nn.Parameter``, ``register_buffer``) are tensors,
  not layers; reading ``self.conv.weight`` is not a call. ``nn.Identity`` is not counted (it computes nothing).
- ``functional:torch.nn.functional.<f>`` - any ``F.*`` / ``torch.nn.functional.*`` call.
- ``torch:torch.<f>`` - any other ``torch.*`` call (``torch.matmul``, ``torch.relu``, ``torch.sum``, ``torch.cat``,
  ``torch.where``, ``torch.linalg.*``, ``torch.ops.aten.*`` ...; ``torch.ops.<ns>`` of a namespace the answer
  registered itself, e.g. a ``torch.library.custom_op`` around its kernel, does not count) EXCEPT allocation /
  creation / layout / meta helpers:
  ``torch.empty*``, ``zeros*``, ``ones*``, ``full*``, ``arange``, ``linspace``, ``eye``, ``tensor``, ``as_tensor``,
  ``rand*``/``randn*``, ``reshape``, ``flatten``, ``permute``, ``transpose``, ``squeeze``/``unsqueeze``, ``split``,
  ``chunk``, ``clone``, ``numel``, ``Size``, dtypes/devices/``finfo``, grad-mode and seed functions, and the
  namespaces ``torch.cuda``, ``torch.backends``, ``torch.jit``, ``torch._dynamo``, ``torch.library``,
  ``torch.utils``, ``torch.autograd``, ``torch.nn.init``, ``torch.nn.utils`` ...
- ``method:Tensor.<m>`` - a method call on a tensor that is not a layout/meta/copy helper: ``x.sum()``,
  ``x.exp()``, ``x.mean()``, ``x.max()``, ``x.clamp()``, ``x.matmul()``, ``x.add_()``, ``x.masked_fill()`` ...
  Not counted: ``.view .reshape .contiguous .permute .transpose .t .flatten .expand .unsqueeze .squeeze .narrow
  .split .chunk .to .float .half .cuda .cpu .clone .detach .copy_ .zero_ .fill_ .new_empty ...`` and the
  int/meta queries ``.size .shape .stride .numel .dim .data_ptr .item .is_contiguous ...``.
- ``operator:<op>`` - arithmetic, matmul or comparison on a tensor: ``x + y``, ``x * 2``, ``x @ w``, ``-x``,
  ``x > 0``, ``x += b``, ``abs(x)``, ``max(x, y)``.

A forward-flow type inference decides what is a tensor. Tensors: ``forward``'s parameters (except ones annotated
``int``/``float``/``bool`` or with a numeric default), ``self.<attr>`` assigned an ``nn.Parameter``/buffer/tensor,
``weight``/``bias``/``running_*`` of module attributes, results of ``torch.*`` calls (allocations included),
layers, tensor methods, indexing/iterating a tensor, and a helper's return value. Ints: constants, ``x.shape``,
``x.size()``, ``x.stride()``, ``x.numel()``, ``x.dim()``, ``x.item()``, ``len()``, ``int()``, ``math.*``,
``triton.cdiv``, ``triton.next_power_of_2`` and arithmetic on ints, so ``n = x.shape[0] * x.shape[1]`` and
``(n + BLOCK - 1) // BLOCK`` keep nothing. Unknown values (``__init__`` arguments, ``self.scale`` set from one)
count only when combined with a tensor. Helper parameters take the types of the call's arguments (memoised per
argument types). Types of a name are merged across ``if`` branches (a tensor on either side stays a tensor).
The walk is bounded (type sizes, six argument-type variants per function, a step budget); code nested past
Python's recursion limit gets the ``analysis_incomplete`` flag and partial results.

Findings (one per code and line; ``reject`` = a hack by itself, ``flag`` = for review)
------------------------------------------------------------------------------------
=================================  ===============  ============================================================
code                               severity         what triggers it
=================================  ===============  ============================================================
try_except_fallback                reject           a ``try`` whose handler (transitively) calls a torch op: a
                                                    PyTorch fallback when the kernel fails
try_except_around_compute          flag             a ``try`` around a kernel launch / torch op without such a
                                                    fallback in its handlers
cuda_stream_use                    flag             ``torch.cuda.Stream``/``stream``/``StreamContext``/
                                                    ``set_stream``/``ExternalStream``, ``torch.Stream``
cuda_graph_use                     flag             ``torch.cuda.CUDAGraph``/``graph``/``make_graphed_callables``
thread_use                         reject           ``threading``, ``_thread``, ``concurrent.futures``,
                                                    ``multiprocessing``, ``torch.multiprocessing``
process_spawn                      reject           ``subprocess``, ``os.system``, ``os.popen``, ``os.exec*``,
                                                    ``os.fork``, ``os.spawn*``, ``os.posix_spawn*``, ``pty``
os_kill_or_exit                    reject           ``os._exit``, ``os.kill(pg)``, ``os.abort``, ``sys.exit``,
                                                    ``exit()``/``quit()``, ``raise SystemExit``
signal_use                         reject           the ``signal`` module (handlers can swallow the harness's
                                                    timeouts)
ctypes_use                         reject           ``ctypes`` / ``cffi``
network                            reject           ``socket``, ``urllib``, ``requests``, ``http``, ``httpx``,
                                                    ``aiohttp``, ``ftplib``, ``smtplib``, ``xmlrpc``, ...
file_write_outside                 flag             ``open(..., 'w'/'a'/'x'/'+')``, ``Path.write_text/bytes``,
                                                    ``os.remove/rename/makedirs``, ``shutil.*``, ``torch.save``
                                                    (any write: paths are not resolved statically)
monkeypatch_torch                  reject           assigning/deleting an attribute of torch / F / nn / triton /
                                                    builtins / time / sys / os / gc / inspect / numpy / random /
                                                    math (``torch.allclose = ...``,
                                                    ``torch.cuda.Event.elapsed_time = ...``,
                                                    ``time.perf_counter = ...``), ``setattr``/``delattr`` on them,
                                                    writes into their ``__dict__``, ``torch.library`` impls of aten
tensor_subclass                    reject           a class inheriting ``torch.Tensor`` (or dispatch/function
                                                    modes), ``__torch_function__``/``__torch_dispatch__``,
                                                    ``_make_subclass``/``_make_wrapper_subclass``/``as_subclass``
output_memoization                 reject           a cache keyed on ``data_ptr()``/``id()``/``hash()`` (dict
                                                    subscript, ``.get``/``.setdefault``/``in``, ``getattr``/
                                                    ``setattr`` names), a pointer/id stored in an attribute or
                                                    global, a tensor stored under a shape key, ``lru_cache``
                                                    functions called with tensors
shape_keyed_cache                  flag             a non-tensor value stored under a key holding ``x.shape``
torch_compile_in_answer            flag             ``torch.compile``, ``torch.jit``, ``torch._dynamo``,
                                                    ``torch._inductor``, ``torch.export``
cpp_extension_use                  flag             ``torch.utils.cpp_extension`` (not Triton)
harness_introspection              reject           ``inspect.stack/currentframe/...``, ``sys._getframe``,
                                                    ``sys.modules``, ``gc.get_objects/get_referrers``,
                                                    ``sys.settrace``, ``__main__``, frame attributes
                                                    (``f_back``, ``f_locals``, ``f_globals``, ``tb_frame``)
precision_downgrade                flag             ``.half()``, ``.bfloat16()``, a call given a float16/bfloat16/
                                                    float8 dtype (``.to(torch.float16)``, ``dtype=``,
                                                    ``tl.float16`` casts in kernels), ``allow_tf32=True``,
                                                    ``input_precision='tf32'``, TF32 backend flags,
                                                    ``set_float32_matmul_precision`` (not 'highest'), autocast
global_state_change                reject (seeds)   ``torch.manual_seed``, ``torch.cuda.manual_seed*``,
                                   / flag           ``set_rng_state``, ``random.seed``, ``numpy.random.seed``
                                                    reject; flag for ``torch.set_*``, assignments to
                                                    ``torch.backends.*`` / ``torch._dynamo.config`` / ``os.environ``,
                                                    ``use_deterministic_algorithms``, ``torch.cuda.set_device``
dynamic_code                       flag             ``exec``, ``eval``, ``compile``, ``__import__``,
                                                    ``importlib.import_module`` with a computed name
triton_kernel_unused               flag             a ``@triton.jit`` function never referenced (not launched, not
                                                    called from another kernel)
empty_output_alloc_without_launch  flag             forward allocates (``torch.empty*`` ...) but neither launches a
                                                    kernel nor keeps a torch op (uninitialised memory returned)
analysis_incomplete                flag             expressions nested so deeply that the walk overflowed Python's
                                                    recursion limit: the other results are partial
=================================  ===============  ============================================================

CLI: ``python -m workflow_scripts.analysis.static --code ANSWER.py [--out OUT.json]`` prints ``to_dict()`` as JSON
and writes it to ``--out`` when given.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from fnmatch import fnmatchcase
from typing import Literal, Union

Severity = Literal["reject", "flag"]

# code -> (severity, one-line description); the docstring's table in data form (global_state_change is "reject"
# for seeds and "flag" otherwise).
FINDING_CODES: dict[str, tuple[str, str]] = {
    "try_except_fallback": ("reject", "try/except whose handler falls back to PyTorch ops"),
    "try_except_around_compute": ("flag", "try/except around kernel launches or torch ops"),
    "cuda_stream_use": ("flag", "explicit CUDA streams"),
    "cuda_graph_use": ("flag", "CUDA graph capture"),
    "thread_use": ("reject", "threads or worker processes"),
    "process_spawn": ("reject", "spawns processes"),
    "os_kill_or_exit": ("reject", "kills processes or exits the interpreter"),
    "signal_use": ("reject", "installs or sends signals"),
    "ctypes_use": ("reject", "ctypes / cffi"),
    "network": ("reject", "network access"),
    "file_write_outside": ("flag", "writes files"),
    "monkeypatch_torch": ("reject", "patches torch / triton / builtins / timing or system modules"),
    "tensor_subclass": ("reject", "tensor subclass or torch function/dispatch override"),
    "output_memoization": ("reject", "results cached by data pointer / id / input shape"),
    "shape_keyed_cache": ("flag", "non-tensor cache keyed on an input shape"),
    "torch_compile_in_answer": ("flag", "torch.compile / torch.jit / dynamo in the answer"),
    "cpp_extension_use": ("flag", "C++/CUDA extension instead of Triton"),
    "harness_introspection": ("reject", "inspects the caller / harness"),
    "precision_downgrade": ("flag", "lower precision than FP32 (half/bf16/fp8 casts, TF32)"),
    "global_state_change": ("reject|flag", "changes global state (seeds: reject; other settings: flag)"),
    "dynamic_code": ("flag", "exec / eval / dynamic imports"),
    "triton_kernel_unused": ("flag", "a @triton.jit function that is never used"),
    "empty_output_alloc_without_launch": ("flag", "forward allocates but neither launches a kernel nor computes"),
    "analysis_incomplete": ("flag", "the code nests too deeply for a complete analysis; results are partial"),
}


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    line: int
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class StaticReport:
    parses: bool
    syntax_error: str | None = None
    has_model_new: bool = False
    defines_triton_kernel: bool = False
    launches_triton_kernel: bool = False
    keeps_torch_op: bool = False
    torch_ops_kept: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def rejected(self) -> bool:
        return any(f.severity == "reject" for f in self.findings)

    @property
    def reject_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings if f.severity == "reject"})

    @property
    def flag_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings if f.severity == "flag"})

    def to_dict(self) -> dict:
        return {
            "parses": self.parses,
            "syntax_error": self.syntax_error,
            "has_model_new": self.has_model_new,
            "defines_triton_kernel": self.defines_triton_kernel,
            "launches_triton_kernel": self.launches_triton_kernel,
            "keeps_torch_op": self.keeps_torch_op,
            "torch_ops_kept": list(self.torch_ops_kept),
            "findings": [f.to_dict() for f in self.findings],
        }


# ----------------------------------------------------------------------------------------------------------------
# Vocabulary
# ----------------------------------------------------------------------------------------------------------------

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

PATCH_ROOTS = {"torch", "triton", "builtins", "time", "sys", "os", "gc", "inspect", "numpy", "random", "math",
               "importlib", "functools", "operator", "timeit", "threading"}
LOW_PRECISION_DTYPES = ("torch.float16", "torch.half", "torch.bfloat16", "torch.float8*",
                        "triton.language.float16", "triton.language.bfloat16", "triton.language.float8*",
                        "triton.language.fp16", "triton.language.bf16", "triton.language.fp8*")
TENSOR_BASES = {"torch.Tensor", "torch._C._TensorBase", "torch._C.TensorBase",
                "torch.utils._python_dispatch.TorchDispatchMode", "torch.overrides.TorchFunctionMode",
                "torch._C._TensorMeta"}
CACHE_DECORATORS = {"functools.lru_cache", "functools.cache"}

# (patterns, code, severity, message): any reference (import, attribute chain, name) matching a pattern.
REF_RULES: list[tuple[tuple[str, ...], str, Severity, str]] = [
    (("threading", "threading.*", "_thread", "_thread.*", "concurrent.futures", "concurrent.futures.*",
      "multiprocessing", "multiprocessing.*", "torch.multiprocessing", "torch.multiprocessing.*"),
     "thread_use", "reject", "uses threads or worker processes ({name})"),
    (("subprocess", "subprocess.*", "os.system", "os.popen", "os.exec*", "os.fork", "os.forkpty", "os.spawn*",
      "os.posix_spawn*", "pty", "pty.*", "asyncio.create_subprocess_*"),
     "process_spawn", "reject", "spawns a process ({name})"),
    (("os._exit", "os.kill", "os.killpg", "os.abort", "sys.exit", "builtins.exit", "builtins.quit"),
     "os_kill_or_exit", "reject", "kills a process or exits the interpreter ({name})"),
    (("signal", "signal.*"), "signal_use", "reject", "uses signals ({name})"),
    (("ctypes", "ctypes.*", "_ctypes", "_ctypes.*", "cffi", "cffi.*"), "ctypes_use", "reject",
     "uses a foreign-function interface ({name})"),
    (("socket", "socket.*", "urllib", "urllib.*", "urllib3", "urllib3.*", "requests", "requests.*", "http",
      "http.*", "httpx", "httpx.*", "aiohttp", "aiohttp.*", "ftplib", "ftplib.*", "smtplib", "smtplib.*",
      "telnetlib", "telnetlib.*", "xmlrpc", "xmlrpc.*", "websocket", "websocket.*", "websockets", "websockets.*",
      "paramiko", "paramiko.*"),
     "network", "reject", "uses the network ({name})"),
    (("inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.getinnerframes", "inspect.trace",
      "inspect.getframeinfo", "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
      "sys.modules", "sys.modules.*", "gc.get_objects", "gc.get_referrers", "gc.get_referents",
      "traceback.extract_stack", "traceback.walk_stack", "__main__", "__main__.*", "threading.settrace"),
     "harness_introspection", "reject", "inspects the caller / harness ({name})"),
    (("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.StreamContext", "torch.cuda.set_stream",
      "torch.cuda.ExternalStream", "torch.cuda.streams", "torch.cuda.streams.*", "torch.Stream"),
     "cuda_stream_use", "flag", "uses explicit CUDA streams ({name})"),
    (("torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.graphs.*",
      "torch.cuda.make_graphed_callables"),
     "cuda_graph_use", "flag", "uses CUDA graphs ({name})"),
    (("torch.compile", "torch.jit", "torch.jit.*", "torch._dynamo", "torch._dynamo.*", "torch._inductor",
      "torch._inductor.*", "torch.export", "torch.export.*"),
     "torch_compile_in_answer", "flag", "uses the PyTorch compiler ({name})"),
    (("torch.utils.cpp_extension", "torch.utils.cpp_extension.*"), "cpp_extension_use", "flag",
     "builds a C++/CUDA extension ({name})"),
]
# (patterns, code, severity, message): only when called.
CALL_RULES: list[tuple[tuple[str, ...], str, Severity, str]] = [
    (("torch.manual_seed", "torch.seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.cuda.seed",
      "torch.cuda.seed_all", "torch.random.manual_seed", "torch.random.seed", "torch.set_rng_state",
      "torch.random.set_rng_state", "torch.cuda.set_rng_state", "torch.cuda.set_rng_state_all", "random.seed",
      "random.setstate", "numpy.random.seed", "numpy.random.set_state"),
     "global_state_change", "reject", "reseeds a random number generator ({name})"),
    (("torch.set_*", "torch.use_deterministic_algorithms", "torch.cuda.set_device",
      "torch.cuda.set_per_process_memory_fraction", "torch.cuda.set_sync_debug_mode", "torch.backends.*.flags",
      "torch.backends.*.set_*", "torch.backends.cuda.enable_*", "torch.backends.cuda.sdp_kernel",
      "os.putenv", "os.unsetenv", "os.environ.update", "os.environ.setdefault", "os.environ.pop",
      "os.environ.clear", "os.chdir"),
     "global_state_change", "flag", "changes global state ({name})"),
    (("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast"),
     "precision_downgrade", "flag", "autocast lowers precision ({name})"),
    (("os.remove", "os.unlink", "os.rename", "os.renames", "os.replace", "os.makedirs", "os.mkdir", "os.rmdir",
      "os.removedirs", "os.truncate", "os.symlink", "os.link", "os.chmod", "os.chown", "os.mkfifo", "shutil.*",
      "torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "tempfile.mk*",
      "tempfile.NamedTemporaryFile", "tempfile.TemporaryFile", "tempfile.TemporaryDirectory"),
     "file_write_outside", "flag", "writes to the file system ({name})"),
    (("builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__", "importlib.import_module",
      "importlib.__import__", "runpy.*"),
     "dynamic_code", "flag", "runs or imports code dynamically ({name})"),
]
# pathlib.Path methods that write (names no str/list/dict method shares).
PATH_WRITE_METHODS = {"write_text", "write_bytes", "touch", "unlink", "rmdir", "mkdir", "symlink_to", "hardlink_to"}
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame", "cr_frame"}
SUBCLASS_ATTRS = {"_make_subclass", "_make_wrapper_subclass", "as_subclass"}


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def _root(name: str) -> str:
    return name.split(".", 1)[0]


# ----------------------------------------------------------------------------------------------------------------
# Types of the flow inference
# ----------------------------------------------------------------------------------------------------------------


class Kind(Enum):
    TENSOR = "tensor"
    INT = "int"  # python scalars: ints, floats, bools
    SHAPE = "shape"  # a tuple of ints from x.shape / x.size() / x.stride()
    PTR = "ptr"  # derived from data_ptr() / id() / hash(): an int that names an object
    OTHER = "other"  # unknown / None / strings / dicts: the bottom of the join


@dataclass(frozen=True)
class Tup:
    elts: tuple


@dataclass(frozen=True)
class Seq:
    elem: object


@dataclass(frozen=True)
class Mod:
    """An nn.Module instance: possible classes ("torch.nn.Conv2d", "local:Block") and container elements."""

    quals: frozenset
    elems: frozenset = frozenset()


@dataclass(frozen=True)
class Refs:
    """References to callables/modules: dotted external names or "func:", "kernel:", "class:", "method:",
    "local:" entries for things defined in the answer."""

    names: frozenset


@dataclass(frozen=True)
class SelfTy:
    cls: str
    super_of: str | None = None  # set for super(): look up after this class in the MRO


@dataclass(frozen=True)
class Bound:
    recv: object
    name: str


@dataclass(frozen=True)
class LambdaTy:
    key: int


Ty = Union[Kind, Tup, Seq, Mod, Refs, SelfTy, Bound, LambdaTy]
T, I, S, P, O = Kind.TENSOR, Kind.INT, Kind.SHAPE, Kind.PTR, Kind.OTHER


def _refs(*names: str) -> Refs:
    return Refs(frozenset(names))


# Size bounds of inferred types, so that loops, recursion and unions cannot grow them without limit.
_MAX_SET = 8
_MAX_TUPLE = 16
_MAX_NEST = 4
_MAX_DOTS = 8


def clip(ty: Ty, depth: int = 0) -> Ty:
    if isinstance(ty, Kind) or isinstance(ty, (SelfTy, LambdaTy)):
        return ty
    if depth >= _MAX_NEST:
        return O
    if isinstance(ty, Refs):
        names = sorted(n for n in ty.names if n.count(".") <= _MAX_DOTS)[:_MAX_SET]
        if not names:
            return O
        return ty if len(names) == len(ty.names) else Refs(frozenset(names))
    if isinstance(ty, Tup):
        if len(ty.elts) > _MAX_TUPLE:
            return Seq(clip(join_all(ty.elts), depth + 1))
        return Tup(tuple(clip(e, depth + 1) for e in ty.elts))
    if isinstance(ty, Seq):
        return Seq(clip(ty.elem, depth + 1))
    if isinstance(ty, Bound):
        return Bound(clip(ty.recv, depth + 1), ty.name)
    if isinstance(ty, Mod):
        quals = frozenset(sorted(ty.quals)[:_MAX_SET])
        elems = frozenset(clip(e, depth + 1) for e in sorted(ty.elems, key=repr)[:_MAX_SET])
        return Mod(quals, elems)
    return O


def join(a: Ty, b: Ty) -> Ty:
    return clip(_join(a, b))


def _join(a: Ty, b: Ty) -> Ty:
    if a == b:
        return a
    if a is O:
        return b
    if b is O:
        return a
    if a is T or b is T:
        return T  # a tensor on either side stays a tensor
    if {a, b} <= {I, P}:
        return P  # pointer taint survives
    if isinstance(a, Tup) and isinstance(b, Tup) and len(a.elts) == len(b.elts):
        return Tup(tuple(join(x, y) for x, y in zip(a.elts, b.elts)))
    if S in (a, b) and (isinstance(a, Tup) or isinstance(b, Tup)):
        return S
    if isinstance(a, Seq) and isinstance(b, Seq):
        return Seq(join(a.elem, b.elem))
    if isinstance(a, Mod) and isinstance(b, Mod):
        return Mod(a.quals | b.quals, a.elems | b.elems)
    if isinstance(a, Refs) and isinstance(b, Refs):
        return Refs(a.names | b.names)
    return O


def join_all(types: Iterable[Ty]) -> Ty:
    out: Ty = O
    for t in types:
        out = join(out, t)
    return out


def contains(ty: Ty, kind: Kind) -> bool:
    if ty is kind:
        return True
    if isinstance(ty, Tup):
        return any(contains(e, kind) for e in ty.elts)
    if isinstance(ty, Seq):
        return contains(ty.elem, kind)
    return False


def elem_of(ty: Ty) -> Ty:
    """Type of the items produced by iterating / indexing ``ty``."""
    if ty is T:
        return T
    if ty is S:
        return I
    if isinstance(ty, Seq):
        return ty.elem
    if isinstance(ty, Tup):
        return join_all(ty.elts)
    if isinstance(ty, Mod):
        return _container_elem(ty)
    return O


def _container_elem(mod: Mod) -> Ty:
    if mod.elems:
        return join_all(mod.elems)
    return Mod(frozenset(q + "[]" for q in mod.quals))  # unknown elements of a torch container: torch layers


# ----------------------------------------------------------------------------------------------------------------
# Module tables
# ----------------------------------------------------------------------------------------------------------------

FuncNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]


@dataclass
class ClassInfo:
    name: str
    node: ast.ClassDef
    local_bases: list[str] = field(default_factory=list)
    external_bases: list[str] = field(default_factory=list)
    methods: dict[str, FuncNode] = field(default_factory=dict)
    kernels: set[str] = field(default_factory=set)
    attrs: dict[str, Ty] = field(default_factory=dict)
    is_module: bool = False
    is_autograd_fn: bool = False


class ModuleTables:
    """What the answer binds at module level: imports, functions, kernels, classes, constants."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.imports: dict[str, str] = {}
        self.functions: dict[str, FuncNode] = {}
        self.kernels: dict[str, ast.AST] = {}
        self.kernel_nodes: set[int] = set()
        self.classes: dict[str, ClassInfo] = {}
        self.constants: dict[str, Ty] = {}
        self.class_aliases: dict[str, str] = {}
        self.local_refs: dict[str, str] = {}  # name = Fn.apply / name = helper: refs to the answer's own code
        self.module_env: dict[str, Ty] = {}  # types of module-level names after the module body ran
        self.bound_names: set[str] = set()
        self._collect_bound_names()
        self._collect_imports()
        for name, dotted in DEFAULT_ALIASES.items():
            if name not in self.bound_names or name == "__builtins__":
                self.imports.setdefault(name, dotted)
        self._collect_definitions()

    # -- names --
    def _collect_bound_names(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bound_names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound_names.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound_names.add(node.arg)
            elif isinstance(node, ast.alias):
                self.bound_names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.bound_names.add(node.name)

    def _collect_imports(self) -> None:
        # All imports, at any depth (a local import inside forward counts too; last binding wins).
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(self, node: ast.AST) -> str | None:
        """The canonical dotted name an expression refers to, through imports; None when it is not one."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):  # iterative: attribute chains can be thousands long
            parts.append(node.attr)
            node = node.value
        base: str | None = None
        if isinstance(node, ast.Name):
            if node.id in self.imports:
                base = self.imports[node.id]
            elif node.id not in self.bound_names and hasattr(builtins, node.id):
                base = f"builtins.{node.id}"
        elif (isinstance(node, ast.Call) and len(node.args) >= 2 and not node.keywords
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and isinstance(node.func, ast.Name) and self.dotted(node.func) == "builtins.getattr"):
            inner = self.dotted(node.args[0])
            base = f"{inner}.{node.args[1].value}" if inner else None
        if base is None:
            return None
        return ".".join([base, *reversed(parts)])

    def is_kernel_decorator(self, dec: ast.AST) -> bool:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = self.dotted(target)
        return bool(name) and name.startswith("triton.") and name.rsplit(".", 1)[-1] in KERNEL_DECORATORS

    def is_kernel(self, fn: ast.AST) -> bool:
        return isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            self.is_kernel_decorator(d) for d in fn.decorator_list
        )

    # -- definitions --
    def _collect_definitions(self) -> None:
        for node in ast.walk(self.tree):
            if self.is_kernel(node):
                self.kernels[node.name] = node
                self.kernel_nodes.add(id(node))
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(stmt) not in self.kernel_nodes:
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = self._class_info(stmt)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                self._module_assign(stmt.targets[0].id, stmt.value)
        # Module / autograd-function status propagates through local bases.
        changed = True
        while changed:
            changed = False
            for info in self.classes.values():
                for base in info.local_bases:
                    b = self.classes.get(base)
                    if b and b.is_module and not info.is_module:
                        info.is_module = changed = True
                    if b and b.is_autograd_fn and not info.is_autograd_fn:
                        info.is_autograd_fn = changed = True

    def _module_assign(self, name: str, value: ast.AST) -> None:
        # kernel = triton.jit(fn)
        if isinstance(value, ast.Call) and self.is_kernel_decorator(value.func):
            self.kernels[name] = value
            return
        if isinstance(value, ast.Name) and value.id in self.classes:
            self.class_aliases[name] = value.id
            return
        if isinstance(value, ast.Name) and value.id in self.kernels:
            self.kernels[name] = self.kernels[value.id]
            return
        if isinstance(value, ast.Name) and value.id in self.functions:
            self.local_refs[name] = f"func:{value.id}"
            return
        if (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                and value.value.id in self.classes):
            self.local_refs[name] = f"class:{value.value.id}.{value.attr}"
            return
        dotted = self.dotted(value)
        if dotted and not dotted.startswith("builtins."):
            self.imports[name] = dotted  # relu = torch.relu: an alias
            return
        if isinstance(value, ast.Constant) and isinstance(value.value, (int, float, bool, complex)):
            self.constants[name] = I
        elif isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant):
            self.constants[name] = I
        elif isinstance(value, ast.BinOp) and all(isinstance(v, ast.Constant) for v in (value.left, value.right)):
            self.constants[name] = I

    def _class_info(self, node: ast.ClassDef) -> ClassInfo:
        info = ClassInfo(node.name, node)
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in self.classes:
                info.local_bases.append(base.id)
                continue
            dotted = self.dotted(base)
            if dotted:
                info.external_bases.append(dotted)
                if dotted.startswith("torch.nn.") and dotted.rsplit(".", 1)[-1][:1].isupper():
                    info.is_module = True
                if dotted in ("torch.autograd.Function", "torch.autograd.function.Function"):
                    info.is_autograd_fn = True
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if id(stmt) in self.kernel_nodes:
                    info.kernels.add(stmt.name)
                else:
                    info.methods[stmt.name] = stmt
        return info

    def mro(self, cls: str) -> list[str]:
        out: list[str] = []

        def visit(c: str) -> None:
            if c in out or c not in self.classes:
                return
            out.append(c)
            for b in self.classes[c].local_bases:
                visit(b)

        visit(cls)
        return out

    def lookup_method(self, cls: str, name: str, after: str | None = None) -> tuple[str, FuncNode] | None:
        order = self.mro(cls)
        if after is not None and after in order:
            order = order[order.index(after) + 1 :]
        for c in order:
            if name in self.classes[c].methods:
                return c, self.classes[c].methods[name]
        return None

    def lookup_attr(self, cls: str) -> dict[str, Ty]:
        merged: dict[str, Ty] = {}
        for c in reversed(self.mro(cls)):
            merged.update(self.classes[c].attrs)
        return merged

    def class_kernels(self, cls: str) -> set[str]:
        return set().union(*(self.classes[c].kernels for c in self.mro(cls))) if cls in self.classes else set()


# ----------------------------------------------------------------------------------------------------------------
# Flow analysis
# ----------------------------------------------------------------------------------------------------------------

_BINOP = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.MatMult: "@", ast.Div: "/", ast.FloorDiv: "//",
          ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^",
          ast.BitAnd: "&"}
_CMPOP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_MAX_DEPTH = 40
# Deterministic work budget (statements + expressions visited). Past it, calls are no longer followed and loop
# bodies are walked once: pathological answers end in bounded time with what was found so far.
_STEP_BUDGET = 200_000
# At most this many argument-type variants of one function are analysed; further calls reuse their union.
_MAX_VARIANTS = 6

Event = tuple[str, str, int]  # (kind: "op" | "launch" | "alloc", name, line)


@dataclass
class Frame:
    env: dict[str, Ty]
    cls: str | None  # the class that defines the function being analysed (for super())
    self_ty: Ty | None
    returns: list[Ty] = field(default_factory=list)
    globals_declared: set[str] = field(default_factory=set)
    nested: dict[str, int] = field(default_factory=dict)


class Flow:
    """Walks code the way it runs, inferring types and recording torch ops, launches and allocations."""

    def __init__(self, tables: ModuleTables, emit: bool = True) -> None:
        self.t = tables
        self.emit = emit
        # Ordered sets of events, one per call being analysed (memo summaries) and per root.
        self.captures: list[dict[Event, None]] = []
        self.steps = 0
        self.regions: list[tuple[str, int]] = []
        self.region_events: dict[tuple[str, int], dict[Event, None]] = {}
        self.try_nodes: dict[int, ast.AST] = {}
        self.findings: list[Finding] = []
        self.memo: dict[tuple, tuple[Ty, tuple[Event, ...]]] = {}
        self.active: set[tuple] = set()
        self.variants: dict[int, list[tuple]] = {}
        self.incomplete = False  # a recursion overflow cut the walk short
        self.depth = 0
        self.lambdas: dict[int, tuple[ast.Lambda, dict[str, Ty]]] = {}
        self.nested_defs: dict[int, tuple[FuncNode, dict[str, Ty], str | None, Ty | None]] = {}
        self.frame = Frame({}, None, None)

    # -- recording --
    def record(self, kind: str, name: str, line: int) -> None:
        ev = (kind, name, line)
        for capture in self.captures:
            capture[ev] = None
        for r in self.regions:
            bucket = self.region_events.setdefault(r, {})
            bucket[ev] = None

    @property
    def over_budget(self) -> bool:
        return self.steps > _STEP_BUDGET

    def finding(self, code: str, severity: Severity, node: ast.AST, message: str) -> None:
        if self.emit:
            self.findings.append(Finding(code, severity, getattr(node, "lineno", 0), message))

    # -- roots --
    def run_root(self, fn: FuncNode, cls: str | None = None, self_ty: Ty | None = None) -> list[Event]:
        params = self._params(fn)
        if self_ty is not None and params and not self._is_static(fn):
            params = params[1:]
        args = [self._root_param_type(a, d) for a, d in params]
        self.captures.append({})
        try:
            self.call_function(fn, self_ty if not self._is_static(fn) else None, args, {}, cls)
        except RecursionError:
            self.incomplete = True  # keep what was recorded before the overflow
        finally:
            events = self.captures.pop()
        return list(events)

    def run_body(self, stmts: list[ast.stmt], env_out: dict[str, Ty] | None = None) -> list[Event]:
        saved, self.frame = self.frame, Frame({}, None, None)
        self.captures.append({})
        try:
            self.block([s for s in stmts if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                  ast.ClassDef))])
        except RecursionError:
            self.incomplete = True
        finally:
            if env_out is not None:
                env_out.update(self.frame.env)
            self.frame = saved
            events = self.captures.pop()
        return list(events)

    @staticmethod
    def _params(fn: FuncNode) -> list[tuple[ast.arg, ast.expr | None]]:
        a = fn.args
        positional = a.posonlyargs + a.args
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        return list(zip(positional, defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))

    def _is_static(self, fn: FuncNode) -> bool:
        return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)

    def _is_classmethod(self, fn: FuncNode) -> bool:
        return any(isinstance(d, ast.Name) and d.id == "classmethod" for d in fn.decorator_list)

    @staticmethod
    def _annotation_type(ann: ast.AST | None) -> Ty | None:
        if isinstance(ann, ast.Name) and ann.id in ("int", "float", "bool"):
            return I
        if isinstance(ann, ast.Name) and ann.id == "str":
            return O
        if isinstance(ann, ast.Constant) and ann.value in ("int", "float", "bool"):
            return I
        return None

    def _root_param_type(self, arg: ast.arg, default: ast.expr | None) -> Ty:
        # Forward's parameters are tensors unless their annotation or default says they are python scalars.
        ann = self._annotation_type(arg.annotation)
        if ann is not None:
            return ann
        if isinstance(default, ast.Constant) and isinstance(default.value, (bool, int, float, str)):
            return I if not isinstance(default.value, str) else O
        return T

    # -- calls into the answer's own code --
    def call_function(self, fn: FuncNode, self_ty: Ty | None, args: Sequence[Ty], kwargs: dict[str, Ty],
                      cls: str | None, closure: dict[str, Ty] | None = None) -> Ty:
        if id(fn) in self.t.kernel_nodes:
            return O
        args = [clip(a) for a in args]
        kwargs = {k: clip(v) for k, v in kwargs.items()}
        key = (id(fn), self_ty, tuple(args), tuple(sorted(kwargs.items(), key=lambda kv: kv[0])))
        if key in self.memo:
            ret, events = self.memo[key]
            for ev in events:
                self.record(*ev)
            return ret
        known = self.variants.setdefault(id(fn), [])
        if len(known) >= _MAX_VARIANTS:
            ret = O
            for k in known:
                if k in self.memo:
                    r, events = self.memo[k]
                    ret = join(ret, r)
                    for ev in events:
                        self.record(*ev)
            return ret
        if key in self.active or self.depth >= _MAX_DEPTH or self.over_budget:
            return O  # recursion / budget: no further information
        known.append(key)
        self.active.add(key)
        self.depth += 1
        saved = self.frame
        self.frame = Frame(dict(closure or {}), cls, self_ty)
        self.captures.append({})
        try:
            self._bind(fn, self_ty, list(args), kwargs)
            self.block(fn.body)
            ret = join_all(self.frame.returns)
        finally:
            self.frame = saved
            self.depth -= 1
            self.active.discard(key)
            events = self.captures.pop()
        self.memo[key] = (ret, tuple(events))
        return ret

    def _bind(self, fn: FuncNode, self_ty: Ty | None, args: list[Ty], kwargs: dict[str, Ty]) -> None:
        params = self._params(fn)
        env = self.frame.env
        if self_ty is not None and params:
            env[params[0][0].arg] = self_ty
            params = params[1:]
        n_pos = len(fn.args.posonlyargs) + len(fn.args.args) - (1 if self_ty is not None else 0)
        for i, (arg, default) in enumerate(params):
            if i < n_pos and i < len(args):
                ty = args[i]
            elif arg.arg in kwargs:
                ty = kwargs[arg.arg]
            elif default is not None:
                ty = self._const_type(default)
            else:
                ty = O
            ann = self._annotation_type(arg.annotation)
            env[arg.arg] = ann if ann is not None and ty is O else ty
        if fn.args.vararg:
            env[fn.args.vararg.arg] = Seq(join_all(args[n_pos:]))
        if fn.args.kwarg:
            env[fn.args.kwarg.arg] = O

    @staticmethod
    def _const_type(node: ast.AST) -> Ty:
        if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float, complex)):
            return I
        return O

    # -- statements --
    def block(self, stmts: Iterable[ast.stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        self.steps += 1
        f = self.frame
        passes = 1 if self.over_budget else 2
        if isinstance(s, ast.Expr):
            self.expr(s.value)
        elif isinstance(s, ast.Assign):
            ty = self.expr(s.value)
            for target in s.targets:
                self.assign(target, ty)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.expr(s.value))
        elif isinstance(s, ast.AugAssign):
            cur = self.expr(s.target)
            val = self.expr(s.value)
            if cur is T or val is T:
                self.record("op", f"operator:{_BINOP.get(type(s.op), '?')}=", s.lineno)
                res: Ty = T
            else:
                res = self._binop_type(cur, val, s.op)
            self.assign(s.target, res)
        elif isinstance(s, ast.Return):
            f.returns.append(self.expr(s.value) if s.value is not None else O)
        elif isinstance(s, ast.If):
            self.expr(s.test)
            self._branches([s.body, s.orelse])
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            item = elem_of(self.expr(s.iter))
            before = dict(f.env)
            for _ in range(passes):  # twice so loop-carried types settle
                self.assign(s.target, item)
                self.block(s.body)
            self.frame.env = self._merge(before, self.frame.env)
            self.block(s.orelse)
        elif isinstance(s, ast.While):
            before = dict(f.env)
            for _ in range(passes):
                self.expr(s.test)
                self.block(s.body)
            self.frame.env = self._merge(before, self.frame.env)
            self.block(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                ctx = self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.assign(item.optional_vars, ctx if ctx is T else O)
            self.block(s.body)
        elif isinstance(s, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            self._try(s)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if id(s) in self.t.kernel_nodes:
                f.env[s.name] = _refs(f"kernel:{s.name}")
            else:
                self.nested_defs[id(s)] = (s, f.env, f.cls, f.self_ty)
                f.env[s.name] = _refs(f"local:{id(s)}")
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            for alias in s.names:
                name = alias.asname or alias.name.split(".")[0]
                if isinstance(s, ast.ImportFrom):
                    if s.module and alias.name != "*":
                        f.env[name] = _refs(f"{s.module}.{alias.name}")
                else:
                    f.env[name] = _refs(alias.name if alias.asname else name)
        elif isinstance(s, ast.Global):
            f.globals_declared.update(s.names)
        elif isinstance(s, (ast.Raise,)):
            if s.exc is not None:
                self.expr(s.exc)
        elif isinstance(s, ast.Assert):
            self.expr(s.test)
        elif isinstance(s, ast.Delete):
            for target in s.targets:
                self.expr(target)
        elif isinstance(s, ast.Match):
            self.expr(s.subject)
            self._branches([c.body for c in s.cases])
        # ClassDef, Pass, Break, Continue, Nonlocal: nothing to type.

    def _branches(self, bodies: list[list[ast.stmt]]) -> None:
        before = self.frame.env
        merged: dict[str, Ty] | None = None
        for body in bodies:
            self.frame.env = dict(before)
            self.block(body)
            merged = self.frame.env if merged is None else self._merge(merged, self.frame.env)
        self.frame.env = merged if merged is not None else before

    @staticmethod
    def _merge(a: dict[str, Ty], b: dict[str, Ty]) -> dict[str, Ty]:
        out = dict(a)
        for k, v in b.items():
            out[k] = join(out[k], v) if k in out else v
        return out

    def _try(self, s: ast.AST) -> None:
        rid = id(s)
        self.try_nodes[rid] = s
        self.regions.append(("body", rid))
        try:
            self.block(s.body)
        finally:
            self.regions.pop()
        for h in s.handlers:
            if h.type is not None:
                self.expr(h.type)
            if h.name:
                self.frame.env[h.name] = O
            self.regions.append(("handler", rid))
            try:
                self.block(h.body)
            finally:
                self.regions.pop()
        self.block(s.orelse)
        self.block(s.finalbody)

    # -- assignment --
    def assign(self, target: ast.AST, ty: Ty) -> None:
        f = self.frame
        if isinstance(target, ast.Name):
            f.env[target.id] = ty
            if target.id in f.globals_declared and contains(ty, P):
                self.finding("output_memoization", "reject", target,
                             f"stores a data_ptr()/id() value in the global {target.id!r}")
        elif isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            n = len(elts)
            if isinstance(ty, Tup) and len(ty.elts) == n:
                parts = list(ty.elts)
            else:
                parts = [elem_of(ty) if ty is not T else T] * n
            for e, p in zip(elts, parts):
                if isinstance(e, ast.Starred):
                    self.assign(e.value, Seq(p))
                else:
                    self.assign(e, p)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, Seq(elem_of(ty)))
        elif isinstance(target, ast.Attribute):
            base = self.expr(target.value)
            if isinstance(base, SelfTy) and base.cls in self.t.classes:
                attrs = self.t.classes[base.cls].attrs
                attrs[target.attr] = join(attrs.get(target.attr, O), ty)
                if contains(ty, P):
                    self.finding("output_memoization", "reject", target,
                                 f"stores a data_ptr()/id() value in self.{target.attr}")
        elif isinstance(target, ast.Subscript):
            container = self.expr(target.value)
            key = self.expr(target.slice)
            self._cache_key(container, key, ty, target, store=True)

    def _cache_key(self, container: Ty, key: Ty, value: Ty, node: ast.AST, store: bool) -> None:
        if container in (T, S, I) or isinstance(container, (Tup, Seq, Mod)):
            return  # indexing a tensor / shape / list is not a cache
        if contains(key, P):
            self.finding("output_memoization", "reject", node, "a cache keyed on data_ptr()/id()/hash()")
        elif store and contains(key, S):
            if contains(value, T):
                self.finding("output_memoization", "reject", node, "a tensor cached under an input shape key")
            else:
                self.finding("shape_keyed_cache", "flag", node, "a value cached under an input shape key")

    # -- expressions --
    def expr(self, node: ast.AST | None) -> Ty:
        if node is None:
            return O
        self.steps += 1
        method = getattr(self, f"_e_{type(node).__name__}", None)
        if method is None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child)
            return O
        return clip(method(node))

    def _e_Constant(self, node: ast.Constant) -> Ty:
        return I if isinstance(node.value, (bool, int, float, complex)) else O

    def _e_Name(self, node: ast.Name) -> Ty:
        name = node.id
        f = self.frame
        if name in f.env:
            return f.env[name]
        t = self.t
        if name in t.functions:
            return _refs(f"func:{name}")
        if name in t.kernels:
            return _refs(f"kernel:{name}")
        if name in t.classes:
            return _refs(f"class:{name}")
        if name in t.class_aliases:
            return _refs(f"class:{t.class_aliases[name]}")
        if name in t.local_refs:
            return _refs(t.local_refs[name])
        if name in t.imports:
            return _refs(t.imports[name])
        if name in t.module_env:
            return t.module_env[name]
        if name in t.constants:
            return t.constants[name]
        if callable(getattr(builtins, name, None)):
            return _refs(f"builtins.{name}")
        return O

    def _e_Attribute(self, node: ast.Attribute) -> Ty:
        return self.attr_of(self.expr(node.value), node.attr)

    def attr_of(self, base: Ty, attr: str) -> Ty:
        t = self.t
        if isinstance(base, Refs):
            names = set()
            for r in base.names:
                if r.startswith("class:") and "." not in r:
                    cls = r[len("class:"):]
                    info = t.classes.get(cls)
                    if attr in t.class_kernels(cls):
                        names.add(f"kernel:{attr}")
                    elif t.lookup_method(cls, attr) or (attr == "apply" and info is not None and info.is_autograd_fn):
                        names.add(f"{r}.{attr}")
                elif ":" not in r:
                    names.add(f"{r}.{attr}")
            return Refs(frozenset(names)) if names else O
        if isinstance(base, SelfTy):
            if base.super_of is None:
                attrs = t.lookup_attr(base.cls)
                if attr in attrs:
                    return attrs[attr]
            if attr in t.class_kernels(base.cls):
                return _refs(f"kernel:{attr}")
            found = t.lookup_method(base.cls, attr, after=base.super_of)
            if found:
                return _refs(f"method:{base.cls}:{found[0]}.{attr}")
            return O
        if base is T:
            if attr == "shape":
                return S
            if attr == "ndim":
                return I
            if attr in TENSOR_TENSOR_ATTRS:
                return T
            if attr in ("dtype", "device", "is_cuda", "layout", "requires_grad", "is_leaf", "names"):
                return O
            return Bound(T, attr)
        if isinstance(base, Mod):
            if "weight" in attr or "bias" in attr or attr.startswith("running_"):
                return T  # parameters / buffers of a layer are tensors, not calls
            return Bound(base, attr)
        if base is O or base is S or isinstance(base, (Seq, Tup)):
            return Bound(base, attr)
        return O

    def _e_Subscript(self, node: ast.Subscript) -> Ty:
        base = self.expr(node.value)
        key = self.expr(node.slice)
        if base is T:
            return T
        if base is S:
            return S if isinstance(node.slice, ast.Slice) else I
        if isinstance(base, Tup):
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
                i = node.slice.value
                return base.elts[i] if -len(base.elts) <= i < len(base.elts) else O
            if isinstance(node.slice, ast.Slice):
                return Seq(join_all(base.elts))
            return join_all(base.elts)
        if isinstance(base, Seq):
            return base if isinstance(node.slice, ast.Slice) else base.elem
        if isinstance(base, Mod):
            return _container_elem(base)
        if isinstance(base, Refs):
            return base  # kernel[grid], generic aliases: callers handle launches
        self._cache_key(base, key, O, node, store=False)
        return O

    def _e_BinOp(self, node: ast.BinOp) -> Ty:
        left = self.expr(node.left)
        right = self.expr(node.right)
        if left is T or right is T:
            self.record("op", f"operator:{_BINOP.get(type(node.op), '?')}", node.lineno)
            return T
        return self._binop_type(left, right, node.op)

    @staticmethod
    def _binop_type(left: Ty, right: Ty, op: ast.operator) -> Ty:
        if left in (I, P) and right in (I, P):
            return P if P in (left, right) else I
        if isinstance(op, ast.Add) and (left is S or right is S or isinstance(left, Tup) or isinstance(right, Tup)):
            if isinstance(left, Tup) and isinstance(right, Tup):
                return Tup(left.elts + right.elts)
            return S
        if isinstance(left, Seq) and isinstance(right, Seq):
            return join(left, right)
        if P in (left, right):
            return P  # f-strings / %-formatting of pointers stay tainted
        return O

    def _e_UnaryOp(self, node: ast.UnaryOp) -> Ty:
        v = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            return O
        if v is T and isinstance(node.op, (ast.USub, ast.Invert)):
            self.record("op", "operator:neg" if isinstance(node.op, ast.USub) else "operator:~", node.lineno)
            return T
        return v

    def _e_BoolOp(self, node: ast.BoolOp) -> Ty:
        return join_all(self.expr(v) for v in node.values)

    def _e_Compare(self, node: ast.Compare) -> Ty:
        types = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
        counted = False
        for op, left, right in zip(node.ops, types, types[1:]):
            if isinstance(op, (ast.In, ast.NotIn)):
                self._cache_key(right, left, O, node, store=False)
            elif (left is T or right is T) and type(op) in _CMPOP and not counted:
                self.record("op", f"operator:{_CMPOP[type(op)]}", node.lineno)
                counted = True
        return T if counted else O

    def _e_IfExp(self, node: ast.IfExp) -> Ty:
        self.expr(node.test)
        return join(self.expr(node.body), self.expr(node.orelse))

    def _e_NamedExpr(self, node: ast.NamedExpr) -> Ty:
        ty = self.expr(node.value)
        self.assign(node.target, ty)
        return ty

    def _e_Tuple(self, node: ast.Tuple) -> Ty:
        types = [self.expr(e) for e in node.elts]
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return Seq(join_all(elem_of(t) if isinstance(e, ast.Starred) else t for e, t in zip(node.elts, types)))
        return Tup(tuple(types))

    def _e_List(self, node: ast.List) -> Ty:
        return Seq(join_all(self.expr(e) for e in node.elts))

    def _e_Set(self, node: ast.Set) -> Ty:
        for e in node.elts:
            self.expr(e)
        return O

    def _e_Dict(self, node: ast.Dict) -> Ty:
        for k, v in zip(node.keys, node.values):
            kt = self.expr(k) if k is not None else O
            self.expr(v)
            if contains(kt, P):
                self.finding("output_memoization", "reject", node, "a dict keyed on data_ptr()/id()")
        return O

    def _e_Starred(self, node: ast.Starred) -> Ty:
        return self.expr(node.value)

    def _e_JoinedStr(self, node: ast.JoinedStr) -> Ty:
        tainted = False
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                tainted |= contains(self.expr(v.value), P)
        return P if tainted else O

    def _e_Lambda(self, node: ast.Lambda) -> Ty:
        self.lambdas[id(node)] = (node, self.frame.env)
        saved = self.frame.env
        self.frame.env = dict(saved)
        for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            self.frame.env[a.arg] = O
        try:
            self.expr(node.body)  # a torch call in a lambda body counts where the lambda is made
        finally:
            self.frame.env = saved
        return LambdaTy(id(node))

    def _comprehension(self, generators: list[ast.comprehension], elts: list[ast.AST]) -> list[Ty]:
        saved = self.frame.env
        self.frame.env = dict(saved)
        try:
            for gen in generators:
                self.assign(gen.target, elem_of(self.expr(gen.iter)))
                for cond in gen.ifs:
                    self.expr(cond)
            return [self.expr(e) for e in elts]
        finally:
            self.frame.env = saved

    def _e_ListComp(self, node: ast.ListComp) -> Ty:
        return Seq(self._comprehension(node.generators, [node.elt])[0])

    _e_GeneratorExp = _e_ListComp

    def _e_SetComp(self, node: ast.SetComp) -> Ty:
        self._comprehension(node.generators, [node.elt])
        return O

    def _e_DictComp(self, node: ast.DictComp) -> Ty:
        self._comprehension(node.generators, [node.key, node.value])
        return O

    def _e_Await(self, node: ast.Await) -> Ty:
        return self.expr(node.value)

    # -- calls --
    def _e_Call(self, node: ast.Call) -> Ty:
        func = node.func
        if isinstance(func, ast.Subscript):
            callee = self.expr(func.value)
            self.expr(func.slice)
            args, kwargs = self._args(node)
            if isinstance(callee, Refs) and any(r.startswith("kernel:") for r in callee.names):
                name = next(r for r in sorted(callee.names) if r.startswith("kernel:"))[len("kernel:"):]
                self.record("launch", name, node.lineno)
                return O
            return self.call_value(self._subscript_value(callee), args, kwargs, node)
        self._self_container_update(node)
        callee = self.expr(func)
        args, kwargs = self._args(node)
        return self.call_value(callee, args, kwargs, node)

    def _subscript_value(self, base: Ty) -> Ty:
        if isinstance(base, Mod):
            return _container_elem(base)
        return elem_of(base) if base is not T else O

    def _args(self, node: ast.Call) -> tuple[list[Ty], dict[str, Ty]]:
        args: list[Ty] = []
        for a in node.args:
            ty = self.expr(a)
            args.append(elem_of(ty) if isinstance(a, ast.Starred) else ty)
        kwargs: dict[str, Ty] = {}
        for k in node.keywords:
            ty = self.expr(k.value)
            if k.arg is not None:
                kwargs[k.arg] = ty
        return args, kwargs

    def _self_container_update(self, node: ast.Call) -> None:
        # self.layers.append(Block()) / self.register_buffer("w", t) / setattr(self, "w", v): typed attributes.
        func = node.func
        f = self.frame
        if not isinstance(func, ast.Attribute):
            if (isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) == 3
                    and isinstance(node.args[0], ast.Name) and isinstance(f.env.get(node.args[0].id), SelfTy)
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
                cls = f.env[node.args[0].id].cls
                if cls in self.t.classes:
                    self.t.classes[cls].attrs[node.args[1].value] = self.expr(node.args[2])
            return
        recv = func.value
        if isinstance(recv, ast.Name) and isinstance(f.env.get(recv.id), SelfTy):
            cls = f.env[recv.id].cls
            if cls not in self.t.classes:
                return
            attrs = self.t.classes[cls].attrs
            if (func.attr in ("register_buffer", "register_parameter", "register_module", "add_module")
                    and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                attrs[node.args[0].value] = self.expr(node.args[1])
        elif (isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name)
              and isinstance(f.env.get(recv.value.id), SelfTy) and func.attr in ("append", "extend", "insert")):
            cls = f.env[recv.value.id].cls
            if cls not in self.t.classes:
                return
            attrs = self.t.classes[cls].attrs
            current = attrs.get(recv.attr)
            if isinstance(current, Mod) and node.args:
                item = self.expr(node.args[-1])
                if func.attr == "extend":
                    item = elem_of(item)
                if isinstance(item, Mod):
                    attrs[recv.attr] = Mod(current.quals, current.elems | {item})

    def call_value(self, callee: Ty, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if isinstance(callee, Refs):
            return join_all(self.call_ref(r, args, kwargs, node) for r in sorted(callee.names))
        if isinstance(callee, Mod):
            return self.call_module(callee, args, kwargs, node)
        if isinstance(callee, Bound):
            return self.call_method(callee.recv, callee.name, args, kwargs, node)
        if isinstance(callee, LambdaTy) and callee.key in self.lambdas:
            lam, closure = self.lambdas[callee.key]
            saved = self.frame.env
            env = dict(closure)
            params = lam.args.posonlyargs + lam.args.args
            for i, a in enumerate(params):
                env[a.arg] = args[i] if i < len(args) else kwargs.get(a.arg, O)
            self.frame.env = env
            try:
                return self.expr(lam.body)
            finally:
                self.frame.env = saved
        return O

    def call_ref(self, ref: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        t = self.t
        kind, _, rest = ref.partition(":")
        if not rest:
            return self.call_external(ref, args, kwargs, node)
        if kind == "func" and rest in t.functions:
            fn = t.functions[rest]
            if any(self._is_cache_decorator(d) for d in fn.decorator_list) and any(contains(a, T) for a in args):
                self.finding("output_memoization", "reject", node,
                             f"calls the memoised (lru_cache) function {rest!r} with tensors: cached by id")
            return self.call_function(fn, None, args, kwargs, None)
        if kind == "kernel":
            return O
        if kind == "local":
            entry = self.nested_defs.get(int(rest))
            if entry:
                fn, closure, cls, self_ty = entry
                return self.call_function(fn, None, args, kwargs, cls, closure=dict(closure))
            return O
        if kind == "method":
            recv_cls, _, qual = rest.partition(":")
            def_cls, _, name = qual.partition(".")
            fn = t.classes[def_cls].methods.get(name) if def_cls in t.classes else None
            if fn is None:
                return O
            if self._is_static(fn):
                return self.call_function(fn, None, args, kwargs, def_cls)
            if self._is_classmethod(fn):
                return self.call_function(fn, _refs(f"class:{recv_cls}"), args, kwargs, def_cls)
            return self.call_function(fn, SelfTy(recv_cls), args, kwargs, def_cls)
        if kind == "class":
            cls, _, member = rest.partition(".")
            info = t.classes.get(cls)
            if info is None:
                return O
            if not member:
                if info.is_module:
                    return Mod(frozenset({f"local:{cls}"}))
                return O if info.is_autograd_fn else SelfTy(cls)  # plain local classes: instances typed by class
            if member == "apply" and info.is_autograd_fn:
                found = t.lookup_method(cls, "forward")
                if found:  # Fn.apply(*args) runs Fn.forward(ctx, *args)
                    return self.call_function(found[1], None, [O] + args, kwargs, found[0])
                return O
            found = t.lookup_method(cls, member)
            if found is None:
                return O
            def_cls, fn = found
            if self._is_classmethod(fn):
                return self.call_function(fn, _refs(f"class:{cls}"), args, kwargs, def_cls)
            return self.call_function(fn, None, args, kwargs, def_cls)
        return O

    def _is_cache_decorator(self, dec: ast.AST) -> bool:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = self.t.dotted(target)
        return name in CACHE_DECORATORS

    def call_module(self, mod: Mod, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        ret: Ty = O
        for q in sorted(mod.quals):
            if q.startswith("local:"):
                cls = q[len("local:"):]
                found = self.t.lookup_method(cls, "forward")
                if found:
                    ret = join(ret, self.call_function(found[1], SelfTy(cls), args, kwargs, found[0]))
            elif q in NN_NONCALLABLE_CONTAINERS:
                continue
            elif q in NN_NO_COMPUTE:
                ret = join(ret, args[0] if args else O)
            elif q == "torch.nn.Sequential" and mod.elems:
                for e in sorted(mod.elems, key=repr):
                    ret = join(ret, self.call_module(e, args, kwargs, node) if isinstance(e, Mod) else O)
            else:
                self.record("op", f"layer:{q}", node.lineno)
                ret = T
        return ret

    def call_method(self, recv: Ty, name: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if recv is T:
            return self.tensor_method(name, args, node)
        if name == "data_ptr":
            return P  # x.untyped_storage().data_ptr() and friends
        if isinstance(recv, Mod):
            if name in ("forward", "__call__"):
                return self.call_module(recv, args, kwargs, node)
            if name in ("values", "children", "modules"):
                return Seq(_container_elem(recv))
            if name == "items":
                return Seq(Tup((O, _container_elem(recv))))
            if name in MODULE_NONCOMPUTE_METHODS:
                return O
            ret: Ty = O
            for q in sorted(recv.quals):
                if q.startswith("local:"):
                    cls = q[len("local:"):]
                    found = self.t.lookup_method(cls, name)
                    if found:
                        ret = join(ret, self.call_function(found[1], SelfTy(cls), args, kwargs, found[0]))
                elif q not in NN_NONCALLABLE_CONTAINERS and q not in NN_NO_COMPUTE:
                    self.record("op", f"layer:{q}", node.lineno)  # e.g. self.conv._conv_forward(x, w, b)
                    ret = T
            return ret
        if recv is S:
            return I if name in ("numel", "index", "count", "__len__") else O
        if name in ("get", "setdefault", "pop", "__getitem__", "__contains__", "__setitem__") and args:
            value = args[1] if len(args) > 1 else O
            self._cache_key(recv, args[0], value, node, store=name in ("setdefault", "__setitem__"))
            return O
        if recv is O and name in TENSOR_MATH_METHODS_STRICT:
            self.record("op", f"method:Tensor.{name}", node.lineno)
            return T
        return O

    def tensor_method(self, name: str, args: list[Ty], node: ast.Call) -> Ty:
        if name in ("size", "stride"):
            return I if args else S
        if name in TENSOR_INT_METHODS:
            return I
        if name == "data_ptr":
            return P
        if name in TENSOR_OTHER_METHODS:
            return O
        if name in TENSOR_LAYOUT_METHODS:
            if name in TENSOR_ALLOC_METHODS:
                self.record("alloc", f"Tensor.{name}", node.lineno)
            return T
        self.record("op", f"method:Tensor.{name}", node.lineno)
        return T

    def call_external(self, d: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if d.startswith("builtins."):
            return self.call_builtin(d[len("builtins."):], args, kwargs, node)
        if d.startswith("torch."):
            return self.call_torch(d, args, kwargs, node)
        if d.startswith("triton."):
            if d in ("triton.cdiv", "triton.next_power_of_2", "triton.language.cdiv"):
                return I
            return O
        if d.startswith("math."):
            return I
        if d == "functools.partial" and args:
            return args[0] if isinstance(args[0], (Refs, LambdaTy, Mod)) else O
        if d.startswith("operator.") and any(a is T for a in args):
            self.record("op", f"operator:{d[len('operator.'):]}", node.lineno)
            return T
        return O

    def call_torch(self, d: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if d.startswith("torch.nn.functional."):
            self.record("op", f"functional:{d}", node.lineno)
            return T
        if d.startswith("torch.Tensor."):
            return self.tensor_method(d.rsplit(".", 1)[1], args[1:], node)
        if d.startswith("torch.nn.") and not d.startswith(TORCH_NONOP_PREFIXES):
            tail = d[len("torch.nn."):]
            if "." not in tail and tail[:1].isupper():
                if tail in NN_TENSOR_CLASSES:
                    return T
                if tail in ("ParameterList", "ParameterDict"):
                    return Seq(T)
                elems = set()
                for a in args:
                    for cand in (a, elem_of(a) if isinstance(a, Seq) else O):
                        if isinstance(cand, Mod):
                            elems.add(cand)
                return Mod(frozenset({d}), frozenset(elems))
            return O
        name = d[len("torch."):]
        if name.startswith("ops."):
            namespace = name.split(".")[1] if name.count(".") >= 1 else ""
            if namespace not in TORCH_OPS_NAMESPACES:
                return T
        if name in TORCH_INT_FUNCS:
            return I
        if name in TORCH_SHAPE_FUNCS:
            return S
        if name in TORCH_ALLOC_FUNCS:
            self.record("alloc", d, node.lineno)
            return T
        if name in TORCH_LAYOUT_FUNCS:
            return T
        if name in TORCH_OTHER_FUNCS or d.startswith(TORCH_NONOP_PREFIXES) or name.startswith(("set_", "get_")):
            return O
        if name[:1].isupper():
            return O  # classes (torch.Tensor, torch.Generator ...)
        self.record("op", f"torch:{d}", node.lineno)
        return T

    def call_builtin(self, name: str, args: list[Ty], kwargs: dict[str, Ty], node: ast.Call) -> Ty:
        if name in ("id", "hash"):
            return P
        if name in ("int", "float", "bool", "len", "round", "ord", "divmod"):
            return I
        if name in ("abs", "pow"):
            if any(a is T for a in args):
                self.record("op", f"operator:{name}", node.lineno)
                return T
            return I
        if name in ("min", "max", "sum"):
            if any(contains(a, T) for a in args):
                self.record("op", f"builtin:{name}", node.lineno)
                return T
            return I
        if name in ("tuple", "list"):
            if not args:
                return Seq(O)
            a = args[0]
            if a is S or isinstance(a, Tup):
                return a
            return Seq(elem_of(a))
        if name == "range":
            return Seq(I)
        if name == "enumerate":
            return Seq(Tup((I, elem_of(args[0]) if args else O)))
        if name == "zip":
            return Seq(Tup(tuple(elem_of(a) for a in args)))
        if name in ("reversed", "sorted", "iter", "filter"):
            return Seq(elem_of(args[-1])) if args else O
        if name == "next":
            return elem_of(args[0]) if args else O
        if name == "getattr" and len(node.args) >= 2:
            key = node.args[1]
            if contains(args[1], P):
                self.finding("output_memoization", "reject", node, "getattr with a data_ptr()/id() name")
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return self.attr_of(args[0], key.value)
            return O
        if name in ("setattr", "hasattr", "delattr") and len(args) >= 2 and contains(args[1], P):
            self.finding("output_memoization", "reject", node, f"{name} with a data_ptr()/id() name")
            return O
        if name == "super":
            f = self.frame
            if isinstance(f.self_ty, SelfTy) and f.cls is not None:
                return SelfTy(f.self_ty.cls, super_of=f.cls)
            return O
        return O


# ----------------------------------------------------------------------------------------------------------------
# Syntactic checks (whole module)
# ----------------------------------------------------------------------------------------------------------------


class Scanner:
    """Findings that a construct triggers wherever it is: imports, references, calls, assignments, classes."""

    def __init__(self, tables: ModuleTables) -> None:
        self.t = tables
        self.findings: list[Finding] = []

    def add(self, code: str, severity: Severity, node: ast.AST, message: str) -> None:
        self.findings.append(Finding(code, severity, getattr(node, "lineno", 0), message))

    def scan(self) -> list[Finding]:
        for node in ast.walk(self.t.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._ref(alias.name, node)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                self._ref(node.module, node)
                for alias in node.names:
                    self._ref(f"{node.module}.{alias.name}", node)
            elif isinstance(node, (ast.Name, ast.Attribute)):
                name = self.t.dotted(node)
                if name:
                    self._ref(name, node)
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    if node.attr in FRAME_ATTRS:
                        self.add("harness_introspection", "reject", node, f"reads frame attribute .{node.attr}")
                    if node.attr in SUBCLASS_ATTRS:
                        self.add("tensor_subclass", "reject", node, f"builds tensor subclasses (.{node.attr})")
            elif isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for target in targets:
                    self._store(target, node)
            elif isinstance(node, ast.ClassDef):
                self._class(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name in ("__torch_function__", "__torch_dispatch__"):
                    self.add("tensor_subclass", "reject", node, f"defines {node.name}")
            elif isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if self.t.dotted(exc) in ("builtins.SystemExit", "builtins.KeyboardInterrupt"):
                    self.add("os_kill_or_exit", "reject", node, "raises SystemExit/KeyboardInterrupt")
        return self.findings

    def _ref(self, name: str, node: ast.AST) -> None:
        for patterns, code, severity, message in REF_RULES:
            if _matches(name, patterns):
                self.add(code, severity, node, message.format(name=name))

    def _call(self, node: ast.Call) -> None:
        name = self.t.dotted(node.func)
        if name:
            for patterns, code, severity, message in CALL_RULES:
                if _matches(name, patterns):
                    if code == "dynamic_code" and name in ("builtins.__import__", "importlib.import_module") \
                            and node.args and isinstance(node.args[0], ast.Constant) \
                            and isinstance(node.args[0].value, str):
                        self._ref(node.args[0].value, node)  # a constant module name is just an import
                        continue
                    self.add(code, severity, node, message.format(name=name))
                    break
            if name in ("builtins.open", "io.open", "os.fdopen"):
                mode = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "mode"), None)
                if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                    self.add("file_write_outside", "flag", node, f"opens a file for writing (mode {mode.value!r})")
            if name in ("builtins.setattr", "builtins.delattr") and node.args:
                target = self.t.dotted(node.args[0])
                if target and _root(target) in PATCH_ROOTS:
                    attr = node.args[1] if len(node.args) > 1 else None
                    if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                        target = f"{target}.{attr.value}"  # setattr(torch, "allclose", f) patches torch.allclose
                    self._patched(target, node, via=name.rsplit(".", 1)[-1])
            if name == "torch.set_float32_matmul_precision":
                arg = node.args[0] if node.args else None
                if not (isinstance(arg, ast.Constant) and arg.value == "highest"):
                    self.add("precision_downgrade", "flag", node, "set_float32_matmul_precision below 'highest'")
            if name.startswith("torch.library.") and self._targets_aten(node):
                self.add("monkeypatch_torch", "reject", node, f"overrides an aten op ({name})")
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in ("half", "bfloat16") and not node.args:
                self.add("precision_downgrade", "flag", node, f"casts with .{func.attr}()")
            if func.attr in PATH_WRITE_METHODS:
                self.add("file_write_outside", "flag", node, f"writes a file with .{func.attr}()")
        for value in list(node.args) + [k.value for k in node.keywords]:
            dtype = self.t.dotted(value)
            if dtype and _matches(dtype, LOW_PRECISION_DTYPES):
                self.add("precision_downgrade", "flag", node, f"uses the low-precision dtype {dtype}")
                break
        for k in node.keywords:
            if k.arg == "allow_tf32" and isinstance(k.value, ast.Constant) and k.value.value is True:
                self.add("precision_downgrade", "flag", node, "allow_tf32=True")
            if k.arg == "input_precision" and isinstance(k.value, ast.Constant) \
                    and isinstance(k.value.value, str) and k.value.value.lower().startswith("tf32"):
                self.add("precision_downgrade", "flag", node, f"input_precision={k.value.value!r}")

    def _targets_aten(self, node: ast.Call) -> bool:
        for a in list(node.args) + [k.value for k in node.keywords]:
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("aten"):
                return True
        return False

    def _store(self, target: ast.AST, stmt: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                self._store(e, stmt)
        elif isinstance(target, ast.Starred):
            self._store(target.value, stmt)
        elif isinstance(target, ast.Attribute):
            full = self.t.dotted(target)
            if full and _root(full) in PATCH_ROOTS:
                self._patched(full, stmt, via="assignment")
        elif isinstance(target, ast.Subscript):
            base = target.value
            if isinstance(base, ast.Call) and self.t.dotted(base.func) == "builtins.vars" and base.args:
                inner = self.t.dotted(base.args[0])
                if inner and _root(inner) in PATCH_ROOTS:
                    self.add("monkeypatch_torch", "reject", stmt, f"writes into vars({inner})")
                return
            name = self.t.dotted(base)
            if not name:
                return
            if name.startswith("os.environ"):
                self.add("global_state_change", "flag", stmt, "changes os.environ")
            elif name == "builtins" or (name.endswith(".__dict__") and _root(name) in PATCH_ROOTS):
                self.add("monkeypatch_torch", "reject", stmt, f"writes into {name}")

    def _patched(self, full: str, node: ast.AST, via: str) -> None:
        if full.startswith("torch.backends."):
            self.add("global_state_change", "flag", node, f"sets {full}")
            last = full.rsplit(".", 1)[-1]
            if "tf32" in last or "reduced_precision" in last:
                self.add("precision_downgrade", "flag", node, f"sets {full}")
        elif any(full.startswith(p) for p in ("torch._dynamo.config", "torch._inductor.config",
                                              "torch._functorch.config")):
            self.add("global_state_change", "flag", node, f"sets {full}")
        elif full.startswith("os.environ"):
            self.add("global_state_change", "flag", node, "changes os.environ")
        else:
            self.add("monkeypatch_torch", "reject", node, f"patches {full} ({via})")

    def _class(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self.t.dotted(base)
            if name in TENSOR_BASES:
                self.add("tensor_subclass", "reject", node, f"class {node.name} inherits {name}")
        for kw in node.keywords:
            if kw.arg == "metaclass" and self.t.dotted(kw.value) in TENSOR_BASES:
                self.add("tensor_subclass", "reject", node, f"class {node.name} uses a tensor metaclass")


# ----------------------------------------------------------------------------------------------------------------
# Kernels: definition, launches, use
# ----------------------------------------------------------------------------------------------------------------


_ALIAS_VALUE_NODES = (ast.Name, ast.Attribute, ast.IfExp, ast.Dict, ast.List, ast.Tuple, ast.Subscript, ast.BoolOp)


def _kernel_aliases(tables: ModuleTables) -> set[str]:
    """Kernel names plus names/attributes assigned from expressions that mention a kernel (k = a if c else b)."""
    names = set(tables.kernels)
    for _ in range(3):
        before = len(names)
        for node in ast.walk(tables.tree):
            # Only plain references (k = a if c else b, {"relu": relu_kernel}), never call results.
            if isinstance(node, ast.Assign) and isinstance(node.value, _ALIAS_VALUE_NODES):
                mentioned = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                if mentioned & names:
                    for target in node.targets:
                        for t in ast.walk(target):
                            if isinstance(t, ast.Name):
                                names.add(t.id)
                            elif isinstance(t, ast.Attribute):
                                names.add(t.attr)
        if len(names) == before:
            break
    return names


def _chain_names(node: ast.AST) -> Iterator[str]:
    while True:
        if isinstance(node, ast.Name):
            yield node.id
            return
        if isinstance(node, ast.Attribute):
            yield node.attr
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return


def _launch_nodes(tables: ModuleTables) -> list[ast.Call]:
    aliases = _kernel_aliases(tables)
    inside_kernel: set[int] = set()
    for kid in tables.kernels.values():
        if isinstance(kid, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside_kernel.update(id(n) for n in ast.walk(kid))
    launches = []
    for node in ast.walk(tables.tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and id(node) not in inside_kernel
                and any(n in aliases for n in _chain_names(node.func.value))):
            launches.append(node)
    return launches


def _unused_kernels(tables: ModuleTables) -> list[tuple[str, ast.AST]]:
    used: set[str] = set()
    for node in ast.walk(tables.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            used.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.add(node.value)  # getattr(module, "kernel")
    # One definition may have several names (k = triton.jit(f); K = k): it is used when any of them is.
    names_of: dict[int, list[str]] = {}
    for name, node in tables.kernels.items():
        names_of.setdefault(id(node), []).append(name)
    return [(names[0], tables.kernels[names[0]]) for names in names_of.values() if not set(names) & used]


# ----------------------------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------------------------


def _model_new_class(tables: ModuleTables) -> str | None:
    if "ModelNew" in tables.classes:
        return "ModelNew"
    return tables.class_aliases.get("ModelNew")


def _has_model_new(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "ModelNew":
            return True
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in targets):
                return True
    return False


def _prescan_attributes(tables: ModuleTables) -> None:
    """Type module-level names and every class's self.<attr> (``__init__`` first) before any root is analysed."""
    for _ in range(2):  # twice: attributes built from other attributes
        flow = Flow(tables, emit=False)
        env: dict[str, Ty] = {}
        flow.run_body(tables.tree.body, env_out=env)
        # Only names the tables do not already resolve better (functions, classes, imports).
        tables.module_env = {k: v for k, v in env.items() if v is not O and k not in tables.imports
                             and k not in tables.functions and k not in tables.classes}
        for name, info in tables.classes.items():
            methods = sorted(info.methods.items(), key=lambda kv: kv[0] != "__init__")
            for mname, fn in methods:
                if flow._is_static(fn) or not flow._params(fn):
                    continue
                try:
                    if mname == "__init__":
                        params = flow._params(fn)[1:]
                        args = [flow._annotation_type(a.annotation) or flow._const_type(d) if d is not None
                                else (flow._annotation_type(a.annotation) or O) for a, d in params]
                        flow.call_function(fn, SelfTy(name), args, {}, name)
                    else:
                        flow.run_root(fn, name, SelfTy(name))
                except RecursionError:
                    continue


def _dedupe(findings: Iterable[Finding]) -> list[Finding]:
    seen: dict[tuple[str, int], Finding] = {}
    for f in findings:
        key = (f.code, f.line)
        prev = seen.get(key)
        # One finding per code and line; a reject wins over a flag of the same code.
        if prev is None or (prev.severity == "flag" and f.severity == "reject"):
            seen[key] = f
    return sorted(seen.values(), key=lambda f: (f.line, f.code, f.message))


def _enclosing_classes(tree: ast.Module) -> dict[int, str]:
    owner: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    owner[id(stmt)] = node.name
    return owner


def analyze_source(code: str) -> StaticReport:
    """The static report of an answer's source (see the module docstring for every rule)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return StaticReport(parses=False, syntax_error=f"{e.msg} (line {e.lineno})")
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return StaticReport(parses=False, syntax_error=f"{type(e).__name__}: {e}")

    report = StaticReport(parses=True, has_model_new=_has_model_new(tree))
    try:
        _analyze_tree(tree, report)
    except RecursionError:
        # Only absurdly deep code gets here; what was set on the report so far stands.
        report.findings = _dedupe([*report.findings, Finding(
            "analysis_incomplete", "flag", 0, "the code nests too deeply for a complete analysis")])
    return report


def _analyze_tree(tree: ast.Module, report: StaticReport) -> None:
    tables = ModuleTables(tree)
    report.defines_triton_kernel = bool(tables.kernels)
    report.launches_triton_kernel = bool(_launch_nodes(tables))

    findings: list[Finding] = Scanner(tables).scan()
    report.findings = _dedupe(findings)
    _prescan_attributes(tables)

    flow = Flow(tables, emit=True)
    forward_events: list[Event] = []
    forward_node: FuncNode | None = None
    model_cls = _model_new_class(tables)
    try:
        if model_cls is not None:
            found = tables.lookup_method(model_cls, "forward")
            if found is not None:
                forward_node = found[1]
                forward_events = flow.run_root(found[1], found[0], SelfTy(model_cls))
        # Every other function, method and the module body: for the findings inside them (fallbacks, caches).
        owner = _enclosing_classes(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in tables.kernel_nodes:
                cls = owner.get(id(node))
                flow.run_root(node, cls, SelfTy(cls) if cls else None)
        flow.run_body(tree.body)
    except RecursionError:
        flow.incomplete = True  # pathological nesting: keep what was found so far

    ops: list[str] = []
    for kind, name, _line in forward_events:
        if kind == "op" and name not in ops:
            ops.append(name)
    report.keeps_torch_op = bool(ops)
    report.torch_ops_kept = ops

    for rid, node in flow.try_nodes.items():
        handler_ops = sorted({n for k, n, _ in flow.region_events.get(("handler", rid), {}) if k == "op"})
        body_events = flow.region_events.get(("body", rid), {})
        if handler_ops:
            findings.append(Finding("try_except_fallback", "reject", node.lineno,
                                    "except handler falls back to PyTorch: " + ", ".join(handler_ops[:5])))
        elif any(k in ("op", "launch") for k, _, _ in body_events):
            findings.append(Finding("try_except_around_compute", "flag", node.lineno,
                                    "try/except around kernel launches or torch ops"))
    findings.extend(flow.findings)

    for name, node in _unused_kernels(tables):
        findings.append(Finding("triton_kernel_unused", "flag", getattr(node, "lineno", 0),
                                f"@triton.jit function {name!r} is never used"))
    if flow.incomplete:
        findings.append(Finding("analysis_incomplete", "flag", forward_node.lineno if forward_node else 0,
                                "the code nests too deeply for a complete analysis; results are partial"))
    elif forward_node is not None:
        kinds = {k for k, _, _ in forward_events}
        if "alloc" in kinds and "launch" not in kinds and "op" not in kinds:
            findings.append(Finding("empty_output_alloc_without_launch", "flag", forward_node.lineno,
                                    "forward allocates tensors but launches no kernel and computes nothing"))

    report.findings = _dedupe(findings)
