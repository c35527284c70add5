"""Tests of workflow_scripts.analysis.static: classifications, keeps_torch_op and every finding, both ways."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workflow_scripts.analysis.static import FINDING_CODES, StaticReport, analyze_source

ROOT = Path(__file__).resolve().parents[1]

HEADER = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) + x * 0, mask=mask)


def launch_relu(x):
    out = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out
"""


def answer(body: str, header: str = HEADER) -> StaticReport:
    return analyze_source(header + "\n\n" + textwrap.dedent(body))


def model(forward: str, init: str = "pass", extra: str = "", methods: str = "") -> StaticReport:
    """An answer whose ModelNew has the given __init__ body, forward body and extra methods (all dedented)."""
    init_body = textwrap.indent(textwrap.dedent(init), " " * 8)
    fwd_body = textwrap.indent(textwrap.dedent(forward), " " * 8)
    src = (
        textwrap.dedent(extra)
        + "\n\nclass ModelNew(nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n"
        + init_body
        + "\n\n    def forward(self, x, y=None):\n"
        + fwd_body
        + "\n"
        + textwrap.indent(textwrap.dedent(methods), " " * 4)
    )
    return answer(src)


def codes(report: StaticReport) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in report.findings:
        out.setdefault(f.code, set()).add(f.severity)
    return out


# ------------------------------------------------------------------------------------------------------------
# Parsing and the structural classifications
# ------------------------------------------------------------------------------------------------------------


def test_syntax_error_is_reported_not_raised() -> None:
    r = analyze_source("def forward(self, x):\n    return x +\n")
    assert r.parses is False
    assert r.syntax_error is not None and "line 2" in r.syntax_error
    assert (r.has_model_new, r.defines_triton_kernel, r.launches_triton_kernel, r.keeps_torch_op) == (
        False, False, False, False)
    assert r.findings == [] and r.torch_ops_kept == []
    assert json.loads(json.dumps(r.to_dict()))["parses"] is False


def test_null_bytes_do_not_crash() -> None:
    r = analyze_source("x = 1\x00\n")
    assert r.parses is False and r.syntax_error


def test_to_dict_has_exactly_the_contract_keys() -> None:
    d = model("return launch_relu(x)").to_dict()
    assert set(d) == {"parses", "syntax_error", "has_model_new", "defines_triton_kernel", "launches_triton_kernel",
                      "keeps_torch_op", "torch_ops_kept", "findings"}
    json.dumps(d)


def test_has_model_new() -> None:
    assert model("return launch_relu(x)").has_model_new
    assert not answer("class Model(nn.Module):\n    pass\n").has_model_new
    # A class nested in a function is not top-level.
    assert not answer("def f():\n    class ModelNew:\n        pass\n").has_model_new
    assert answer("class _Impl(nn.Module):\n    pass\nModelNew = _Impl\n").has_model_new


def test_defines_triton_kernel() -> None:
    assert answer("").defines_triton_kernel
    autotuned = """\
    from triton import jit

    @triton.autotune(configs=[triton.Config({'BLOCK': 64})], key=['n'])
    @jit
    def k(x_ptr, n, BLOCK: tl.constexpr):
        pass
    """
    r = analyze_source("import triton\nimport triton.language as tl\n" + textwrap.dedent(autotuned))
    assert r.defines_triton_kernel
    plain = "import torch\n\n@torch.jit.script\ndef f(x):\n    return x\n\ndef g(x):\n    return x\n"
    assert not analyze_source(plain).defines_triton_kernel


def test_launches_triton_kernel() -> None:
    assert model("return launch_relu(x)").launches_triton_kernel
    # Only defined, never launched from Python code.
    r = analyze_source(HEADER.split("def launch_relu")[0])
    assert r.defines_triton_kernel and not r.launches_triton_kernel
    # Launched through an alias chosen at run time and through a staticmethod kernel attribute.
    alias = """\
    class ModelNew(nn.Module):
        @staticmethod
        @triton.jit
        def _k(x_ptr, n, BLOCK: tl.constexpr):
            pass

        def forward(self, x):
            k = relu_kernel if x.is_cuda else relu_kernel
            out = torch.empty_like(x)
            k[(1,)](x, out, x.numel(), BLOCK=1024)
            self._k[(1,)](x, x.numel(), BLOCK=1024)
            return out
    """
    r = answer(alias, header=HEADER.split("def launch_relu")[0])
    assert r.launches_triton_kernel
    # Subscript-calls of non-kernels are not launches.
    r = analyze_source("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                       "        return self.layers[0](x)\n")
    assert not r.launches_triton_kernel


# ------------------------------------------------------------------------------------------------------------
# keeps_torch_op
# ------------------------------------------------------------------------------------------------------------

PURE_TRITON = """\
class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float = 2.0):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(torch.randn(out_features) * 0.02)
        self.register_buffer("shift", torch.zeros(out_features))
        self.scale = scale
        with torch.no_grad():
            self.linear.weight.mul_(0.5)

    def _grid(self, n: int, block: int):
        return ((n + block - 1) // block,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C = x.shape[:2]
        M, K = x.shape
        n = x.shape[0] * x.shape[1]
        n2 = x.numel() // max(1, x.size(-1))
        rows = int(x.size(0)) * len(x.shape) + x.dim() - x.stride(0)
        BLOCK = triton.next_power_of_2(min(n, 1024))
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        blocks = (n + BLOCK - 1) // BLOCK
        scale = self.scale * 2 + math.sqrt(K)
        w = self.linear.weight
        b = self.linear.bias
        out = torch.empty((M, w.shape[0]), device=x.device, dtype=x.dtype)
        tmp = out.new_empty(out.shape).view(-1).reshape(out.shape).to(x.dtype).float()
        flat = x.view(-1).unsqueeze(0).squeeze(0).permute(0).transpose(0, 0).flatten()
        if x.numel() == 0 or x.shape != out.shape:
            pass
        for i in range(blocks):
            offset = i * BLOCK
        relu_kernel[grid](x, out, n, BLOCK=BLOCK)
        relu_kernel[(blocks,)](flat, tmp, n2, BLOCK=1024)
        relu_kernel[self._grid(n, BLOCK)](w, b, rows, BLOCK=1024)
        relu_kernel[(1,)](self.weight, self.shift, scale, BLOCK=1024)
        return launch_relu(out)
"""


def test_pure_triton_forward_keeps_no_torch_op() -> None:
    r = answer(PURE_TRITON)
    assert r.parses and r.has_model_new and r.defines_triton_kernel and r.launches_triton_kernel
    assert r.keeps_torch_op is False, r.torch_ops_kept
    assert r.torch_ops_kept == []
    assert r.findings == []


def test_ops_inside_triton_kernels_and_init_do_not_count() -> None:
    r = model("return launch_relu(x)", init="self.w = nn.Parameter(torch.randn(4) * 0.1 + torch.ones(4))")
    assert not r.keeps_torch_op


def test_uncalled_helper_does_not_count() -> None:
    r = model("return launch_relu(x)", extra="def unused(x):\n    return torch.softmax(x, dim=-1)\n")
    assert not r.keeps_torch_op


def test_unknown_values_alone_do_not_count() -> None:
    # __init__ arguments are of unknown type: arithmetic among them and ints is not tensor arithmetic.
    r = model("s = self.alpha * 2 + self.beta\nreturn launch_relu(x)", init="self.alpha = args[0]\nself.beta = 1")
    assert not r.keeps_torch_op


@pytest.mark.parametrize(
    "forward, init, extra, expected",
    [
        ("return self.conv(x)", "self.conv = nn.Conv2d(3, 3, 3)", "", "layer:torch.nn.Conv2d"),
        ("return torch.matmul(x, y)", "pass", "", "torch:torch.matmul"),
        ("return F.relu(launch_relu(x))", "pass", "", "functional:torch.nn.functional.relu"),
        ("return torch.nn.functional.gelu(x)", "pass", "", "functional:torch.nn.functional.gelu"),
        ("return launch_relu(x) + self.bias", "self.bias = nn.Parameter(torch.zeros(3))", "", "operator:+"),
        ("return x * 2", "pass", "", "operator:*"),
        ("return x @ y", "pass", "", "operator:@"),
        ("return -x", "pass", "", "operator:neg"),
        ("return launch_relu(x > 0)", "pass", "", "operator:>"),
        ("x += y\nreturn x", "pass", "", "operator:+="),
        ("return x.sum(dim=1)", "pass", "", "method:Tensor.sum"),
        ("return launch_relu(x).exp()", "pass", "", "method:Tensor.exp"),
        ("return x.clamp(min=0).contiguous()", "pass", "", "method:Tensor.clamp"),
        ("return abs(x)", "pass", "", "operator:abs"),
        ("return helper(launch_relu(x))", "pass", "def helper(t):\n    return torch.softmax(t, dim=-1)\n",
         "torch:torch.softmax"),
        ("return self._post(launch_relu(x))", "pass", "", "torch:torch.tanh"),
        ("return self.seq(x)", "self.seq = nn.Sequential(nn.Linear(3, 3), nn.ReLU())", "", "layer:torch.nn.Linear"),
        ("return self.seq(x)", "self.seq = nn.Sequential(*[nn.GELU()])", "", "layer:torch.nn.GELU"),
        ("return self.layers[0](x)", "self.layers = nn.ModuleList()\nself.layers.append(nn.Tanh())", "",
         "layer:torch.nn.Tanh"),
        ("return self.conv.forward(x)", "self.conv = nn.Conv1d(3, 3, 1)", "", "layer:torch.nn.Conv1d"),
        ("for layer in self.layers:\n    x = layer(x)\nreturn x", "self.layers = nn.ModuleList([nn.Linear(3, 3)])", "",
         "layer:torch.nn.Linear"),
        ("return self.block(x)", "self.block = Block()",
         "class Block(nn.Module):\n    def forward(self, x):\n        return torch.sigmoid(x)\n",
         "torch:torch.sigmoid"),
        ("return Fn.apply(x)", "pass",
         "class Fn(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
         "        return launch_relu(x).mean()\n", "method:Tensor.mean"),
        ("act = lambda t: torch.relu(t)\nreturn act(x)", "pass", "", "torch:torch.relu"),
        ("return nn.ReLU()(x)", "pass", "", "layer:torch.nn.ReLU"),
        ("return super().forward(x)", "pass", "", None),  # nn.Module.forward: nothing of the answer's
    ],
)
def test_hybrid_forward_keeps_torch_op(forward: str, init: str, extra: str, expected: str | None) -> None:
    r = model(forward, init=init, extra=extra, methods="def _post(self, t):\n    return torch.tanh(t)\n")
    if expected is None:
        assert not r.keeps_torch_op, r.torch_ops_kept
    else:
        assert r.keeps_torch_op, forward
        assert expected in r.torch_ops_kept, r.torch_ops_kept


def test_import_aliases_are_resolved() -> None:
    src = """\
    import torch as th
    from torch.nn import functional as fn
    from torch import relu as R
    soft = th.softmax

    class ModelNew(th.nn.Module):
        def forward(self, x):
            return R(fn.silu(soft(x, -1)))
    """
    r = analyze_source(textwrap.dedent(src))
    assert r.torch_ops_kept == ["torch:torch.softmax", "functional:torch.nn.functional.silu", "torch:torch.relu"]


def test_identity_layer_is_not_counted_but_a_real_one_is() -> None:
    assert not model("return launch_relu(self.id(x))", init="self.id = nn.Identity()").keeps_torch_op
    assert model("return launch_relu(self.ln(x))", init="self.ln = nn.LayerNorm(3)").keeps_torch_op


def test_local_module_that_only_launches_kernels_is_pure() -> None:
    extra = "class Block(nn.Module):\n    def forward(self, x):\n        return launch_relu(x)\n"
    r = model("return self.block(x)", init="self.block = Block()", extra=extra)
    assert not r.keeps_torch_op


def test_custom_op_namespace_of_the_answer_does_not_count_but_aten_does() -> None:
    extra = ('@torch.library.custom_op("mylib::relu", mutates_args=())\n'
             'def my_relu(x: torch.Tensor) -> torch.Tensor:\n    return launch_relu(x)\n')
    assert not model("return torch.ops.mylib.relu(x)", extra=extra).keeps_torch_op
    r = model("return torch.ops.aten.relu.default(x)", extra=extra)
    assert r.torch_ops_kept == ["torch:torch.ops.aten.relu.default"]


def test_module_level_layer_object_counts() -> None:
    r = model("return _act(launch_relu(x))", extra="_act = nn.GELU()\nBLOCK = 256\n")
    assert r.torch_ops_kept == ["layer:torch.nn.GELU"]
    assert not model("n = BLOCK * 2 + x.shape[0]\nreturn launch_relu(x)", extra="BLOCK = 256\n").keeps_torch_op


def test_missing_forward_keeps_nothing() -> None:
    r = answer("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n")
    assert r.has_model_new and not r.keeps_torch_op


def test_inherited_forward_from_local_reference_counts() -> None:
    src = """\
    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)

    class ModelNew(Model):
        pass
    """
    assert answer(src).torch_ops_kept == ["torch:torch.relu"]


def test_pathological_nesting_is_bounded_and_flagged() -> None:
    src = HEADER + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x" + ".exp()" * 700 + "\n"
    r = analyze_source(src)
    assert r.parses
    assert "analysis_incomplete" in codes(r)
    # Deep but reasonable code is analysed completely.
    r = analyze_source(HEADER + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x"
                       + ".exp()" * 50 + "\n")
    assert r.torch_ops_kept == ["method:Tensor.exp"] and "analysis_incomplete" not in codes(r)


def test_recursive_helpers_terminate() -> None:
    extra = "".join(f"def f{i}(t):\n    return f{(i + 1) % 30}(t.a) + f{(i + 7) % 30}(t.b)\n" for i in range(30))
    r = model("return f0(x)", extra=extra)
    assert r.parses and not r.keeps_torch_op


def test_cpu_fallback_branch_counts() -> None:
    r = model("if not x.is_cuda:\n    return torch.relu(x)\nreturn launch_relu(x)")
    assert r.torch_ops_kept == ["torch:torch.relu"]


# ------------------------------------------------------------------------------------------------------------
# Findings
# ------------------------------------------------------------------------------------------------------------


def test_finding_table_covers_required_codes() -> None:
    required = {"try_except_around_compute", "try_except_fallback", "cuda_stream_use", "thread_use",
                "process_spawn", "os_kill_or_exit", "ctypes_use", "network", "file_write_outside",
                "monkeypatch_torch", "tensor_subclass", "output_memoization", "torch_compile_in_answer",
                "harness_introspection", "precision_downgrade", "global_state_change", "triton_kernel_unused"}
    assert required <= set(FINDING_CODES)


def test_finding_fields() -> None:
    r = model("torch.allclose = lambda *a, **k: True\nreturn launch_relu(x)")
    (f,) = [f for f in r.findings if f.code == "monkeypatch_torch"]
    assert f.severity == "reject" and f.line > 0 and "torch.allclose" in f.message
    assert r.reject_codes == ["monkeypatch_torch"]


CLEAN_FORWARD = "return launch_relu(x)"

# (code, severity, positive snippets as (forward, extra)) - every positive must produce exactly that finding.
POSITIVES: list[tuple[str, str, str, str]] = [
    ("try_except_fallback", "reject",
     "try:\n    return launch_relu(x)\nexcept Exception:\n    return torch.relu(x)", ""),
    ("try_except_fallback", "reject",
     "try:\n    return launch_relu(x)\nexcept RuntimeError:\n    return self.ref(x)", ""),
    ("try_except_around_compute", "flag",
     "try:\n    return launch_relu(x)\nexcept Exception as e:\n    raise RuntimeError('kernel failed') from e", ""),
    ("cuda_stream_use", "flag", "s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    return launch_relu(x)", ""),
    ("thread_use", "reject", CLEAN_FORWARD, "import threading\n"),
    ("thread_use", "reject", CLEAN_FORWARD, "from concurrent.futures import ThreadPoolExecutor\n"),
    ("thread_use", "reject", CLEAN_FORWARD, "import multiprocessing as mp\n"),
    ("process_spawn", "reject", CLEAN_FORWARD, "import subprocess\n"),
    ("process_spawn", "reject", "os.system('nvidia-smi')\nreturn launch_relu(x)", "import os\n"),
    ("process_spawn", "reject", "popen('ls')\nreturn launch_relu(x)", "from os import popen\n"),
    ("process_spawn", "reject", "os.execv('/bin/true', [])", "import os\n"),
    ("os_kill_or_exit", "reject", "sys.exit(0)", "import sys\n"),
    ("os_kill_or_exit", "reject", "os._exit(0)", "import os\n"),
    ("os_kill_or_exit", "reject", "exit()", ""),
    ("os_kill_or_exit", "reject", "raise SystemExit(0)", ""),
    ("os_kill_or_exit", "reject", "os.kill(os.getppid(), 9)", "import os\n"),
    ("signal_use", "reject", CLEAN_FORWARD, "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"),
    ("ctypes_use", "reject", CLEAN_FORWARD, "import ctypes\n"),
    ("network", "reject", CLEAN_FORWARD, "import socket\n"),
    ("network", "reject", "urllib.request.urlopen('http://x')\nreturn launch_relu(x)", "import urllib.request\n"),
    ("file_write_outside", "flag", "open('/tmp/x', 'w').write('1')\nreturn launch_relu(x)", ""),
    ("file_write_outside", "flag", "open('/tmp/x', mode='a')\nreturn launch_relu(x)", ""),
    ("file_write_outside", "flag", "Path('/tmp/x').write_text('1')\nreturn launch_relu(x)",
     "from pathlib import Path\n"),
    ("file_write_outside", "flag", "torch.save(x, 'x.pt')\nreturn launch_relu(x)", ""),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "torch.allclose = lambda *a, **k: True\n"),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "torch.cuda.Event.elapsed_time = lambda self, other: 0.001\n"),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "import time\ntime.perf_counter = lambda: 0.0\n"),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "setattr(torch, 'allclose', lambda *a, **k: True)\n"),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "F.relu = lambda x: x\n"),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "import builtins\nbuiltins.print = lambda *a: None\n"),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "torch.Tensor.__eq__ = lambda a, b: True\n"),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "vars(torch)['allclose'] = None\n"),
    ("monkeypatch_torch", "reject", CLEAN_FORWARD, "del torch.testing.assert_close\n"),
    ("tensor_subclass", "reject", CLEAN_FORWARD, "class Fake(torch.Tensor):\n    pass\n"),
    ("tensor_subclass", "reject", CLEAN_FORWARD,
     "class W:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
     "        return func(*args)\n"),
    ("output_memoization", "reject",
     "key = x.data_ptr()\nif key in self._cache:\n    return self._cache[key]\nout = launch_relu(x)\n"
     "self._cache[key] = out\nreturn out", ""),
    ("output_memoization", "reject",
     "out = self._cache.get(id(x))\nif out is None:\n    out = launch_relu(x)\nreturn out", ""),
    ("output_memoization", "reject",
     "if self._last == x.untyped_storage().data_ptr():\n    return self._out\n"
     "self._last = x.untyped_storage().data_ptr()\nself._out = launch_relu(x)\nreturn self._out", ""),
    ("output_memoization", "reject",
     "k = (x.shape, x.dtype)\nif k not in self._cache:\n    self._cache[k] = launch_relu(x)\n"
     "return self._cache[k]", ""),
    ("output_memoization", "reject", "return cached(x)",
     "import functools\n@functools.lru_cache(maxsize=None)\ndef cached(x):\n    return launch_relu(x)\n"),
    ("output_memoization", "reject",
     "name = f'_buf_{x.data_ptr()}'\nif hasattr(self, name):\n    return getattr(self, name)\n"
     "return launch_relu(x)", ""),
    ("shape_keyed_cache", "flag",
     "self._blocks[tuple(x.shape)] = 1024\nreturn launch_relu(x)", ""),
    ("torch_compile_in_answer", "flag", "return torch.compile(launch_relu)(x)", ""),
    ("torch_compile_in_answer", "flag", CLEAN_FORWARD, "@torch.jit.script\ndef f(x):\n    return x\n"),
    ("cuda_graph_use", "flag", "g = torch.cuda.CUDAGraph()\nreturn launch_relu(x)", ""),
    ("cpp_extension_use", "flag", CLEAN_FORWARD, "from torch.utils.cpp_extension import load_inline\n"),
    ("harness_introspection", "reject", "inspect.stack()\nreturn launch_relu(x)", "import inspect\n"),
    ("harness_introspection", "reject", "f = sys._getframe(1)\nreturn launch_relu(x)", "import sys\n"),
    ("harness_introspection", "reject", "ref = sys.modules['__main__']\nreturn launch_relu(x)", "import sys\n"),
    ("harness_introspection", "reject", "gc.get_objects()\nreturn launch_relu(x)", "import gc\n"),
    ("harness_introspection", "reject", "v = frame.f_back.f_locals\nreturn launch_relu(x)", ""),
    ("precision_downgrade", "flag", "return launch_relu(x.half()).float()", ""),
    ("precision_downgrade", "flag", "return launch_relu(x.to(torch.bfloat16))", ""),
    ("precision_downgrade", "flag", "out = torch.empty_like(x, dtype=torch.float16)\nreturn launch_relu(out)", ""),
    ("precision_downgrade", "flag", CLEAN_FORWARD,
     "@triton.jit\ndef k2(a_ptr, b_ptr):\n    a = tl.load(a_ptr).to(tl.float16)\n"
     "    tl.store(b_ptr, tl.dot(a, a, allow_tf32=True))\nk2_ref = k2\n"),
    ("precision_downgrade", "flag", CLEAN_FORWARD,
     "@triton.jit\ndef k3(a_ptr):\n    a = tl.load(a_ptr)\n    tl.store(a_ptr, tl.dot(a, a, input_precision='tf32'))\n"
     "K3 = k3\n"),
    ("precision_downgrade", "flag", CLEAN_FORWARD, "torch.backends.cuda.matmul.allow_tf32 = True\n"),
    ("precision_downgrade", "flag", CLEAN_FORWARD, "torch.set_float32_matmul_precision('high')\n"),
    ("global_state_change", "reject", "torch.manual_seed(0)\nreturn launch_relu(x)", ""),
    ("global_state_change", "reject", CLEAN_FORWARD, "import random\nrandom.seed(1)\n"),
    ("global_state_change", "flag", CLEAN_FORWARD, "torch.backends.cudnn.benchmark = True\n"),
    ("global_state_change", "flag", CLEAN_FORWARD, "torch.set_default_dtype(torch.float64)\n"),
    ("global_state_change", "flag", CLEAN_FORWARD, "import os\nos.environ['CUDA_LAUNCH_BLOCKING'] = '1'\n"),
    ("dynamic_code", "flag", "exec('y = 1')\nreturn launch_relu(x)", ""),
    ("triton_kernel_unused", "flag", CLEAN_FORWARD,
     "@triton.jit\ndef never_used(x_ptr):\n    pass\n"),
    ("empty_output_alloc_without_launch", "flag", "return torch.empty_like(x)", ""),
]


@pytest.mark.parametrize("code, severity, forward, extra", POSITIVES,
                         ids=[f"{c}-{i}" for i, (c, *_rest) in enumerate(POSITIVES)])
def test_finding_positive(code: str, severity: str, forward: str, extra: str) -> None:
    init = "self._cache = {}\nself._blocks = {}\nself._last = None\nself._out = None\nself.ref = nn.ReLU()"
    r = model(forward, init=init, extra=extra)
    assert r.parses
    found = codes(r)
    assert code in found, (code, [(f.code, f.severity, f.line, f.message) for f in r.findings])
    assert severity in found[code]


# (code, forward, extra): constructs that look alike but must not produce that finding.
NEGATIVES: list[tuple[str, str, str]] = [
    ("try_except_fallback",
     "try:\n    return launch_relu(x)\nexcept Exception as e:\n    raise RuntimeError('kernel failed') from e", ""),
    ("try_except_around_compute", CLEAN_FORWARD, "try:\n    import triton\nexcept ImportError:\n    triton = None\n"),
    ("try_except_around_compute", "try:\n    n = int('3')\nexcept ValueError:\n    n = 0\nreturn launch_relu(x)", ""),
    ("cuda_stream_use", "s = torch.cuda.current_stream()\nreturn launch_relu(x)", ""),
    ("thread_use", CLEAN_FORWARD, "import os\nimport collections\n"),
    ("process_spawn", "p = os.path.join('a', 'b')\nreturn launch_relu(x)", "import os\n"),
    ("os_kill_or_exit", "raise ValueError('bad shape')", ""),
    ("os_kill_or_exit", "n = os.getpid()\nreturn launch_relu(x)", "import os\n"),
    ("signal_use", CLEAN_FORWARD, ""),
    ("ctypes_use", CLEAN_FORWARD, "import struct\n"),
    ("network", CLEAN_FORWARD, "import json\n"),
    ("file_write_outside", "t = open('/etc/hostname').read()\nreturn launch_relu(x)", ""),
    ("file_write_outside", "t = open('/etc/hostname', 'r').read()\nreturn launch_relu(x)", ""),
    ("monkeypatch_torch", "self.weight = None\nreturn launch_relu(x)", ""),
    ("monkeypatch_torch", CLEAN_FORWARD, "torch.backends.cudnn.benchmark = True\n"),
    ("monkeypatch_torch", "x.requires_grad = False\nreturn launch_relu(x)", ""),
    ("tensor_subclass", CLEAN_FORWARD, "class Helper(nn.Module):\n    pass\n"),
    ("output_memoization", "out = launch_relu(x)\nself._n_calls = x.numel()\nreturn out", ""),
    ("output_memoization",
     "key = (x.shape[0], x.shape[1])\nif key not in self._cache:\n    self._cache[key] = 128\n"
     "return launch_relu(x)", ""),
    ("output_memoization", "if x.data_ptr() == y.data_ptr():\n    y = x.clone()\nreturn launch_relu(x)", ""),
    ("output_memoization", "return cached(x.shape[0])",
     "import functools\n@functools.lru_cache(maxsize=None)\ndef cached(n):\n    return n * 2\n"),
    ("shape_keyed_cache", "self._blocks[(128, 64)] = 1024\nreturn launch_relu(x)", ""),
    ("torch_compile_in_answer", CLEAN_FORWARD, ""),
    ("cuda_graph_use", CLEAN_FORWARD, ""),
    ("harness_introspection", "sig = inspect.signature(launch_relu)\nreturn launch_relu(x)", "import inspect\n"),
    ("harness_introspection", "v = sys.version_info\nreturn launch_relu(x)", "import sys\n"),
    ("precision_downgrade", "return launch_relu(x.to(torch.float32)).float()", ""),
    ("precision_downgrade", "out = torch.empty_like(x, dtype=torch.float32)\nreturn launch_relu(out)", ""),
    ("precision_downgrade", CLEAN_FORWARD,
     "@triton.jit\ndef k4(a_ptr):\n    a = tl.load(a_ptr)\n    tl.store(a_ptr, tl.dot(a, a, input_precision='ieee'))\n"
     "K4 = k4\n"),
    ("precision_downgrade", "if x.dtype == torch.float16:\n    raise TypeError\nreturn launch_relu(x)", ""),
    ("global_state_change", "g = torch.Generator()\nreturn launch_relu(x)", ""),
    ("global_state_change", "d = torch.get_default_dtype()\nreturn launch_relu(x)", ""),
    ("dynamic_code", "v = eval_kernel(x)\nreturn v", "def eval_kernel(t):\n    return launch_relu(t)\n"),
    ("triton_kernel_unused", CLEAN_FORWARD,
     "@triton.jit\ndef _device_fn(x):\n    return x * 2\n\n@triton.jit\ndef k5(x_ptr):\n"
     "    tl.store(x_ptr, _device_fn(tl.load(x_ptr)))\nK5 = k5\n"),
    ("empty_output_alloc_without_launch", CLEAN_FORWARD, ""),
    ("empty_output_alloc_without_launch", "out = torch.empty_like(x)\nreturn torch.relu(x, out=out)", ""),
]


@pytest.mark.parametrize("code, forward, extra", NEGATIVES, ids=[f"{c}-{i}" for i, (c, *_r) in enumerate(NEGATIVES)])
def test_finding_negative(code: str, forward: str, extra: str) -> None:
    init = "self._cache = {}\nself._blocks = {}\nself._n_calls = 0\nself.weight = nn.Parameter(torch.ones(3))"
    r = model(forward, init=init, extra=extra)
    assert r.parses
    assert code not in codes(r), [(f.code, f.severity, f.line, f.message) for f in r.findings]


def test_clean_answer_has_no_findings() -> None:
    assert model(CLEAN_FORWARD).findings == []


def test_setattr_on_torch_names_the_attribute_and_backends_are_state_not_patches() -> None:
    r = model(CLEAN_FORWARD, extra="setattr(torch, 'allclose', lambda *a, **k: True)\n"
                                   "setattr(torch.backends.cudnn, 'benchmark', True)\n")
    messages = {f.code: f.message for f in r.findings}
    assert "torch.allclose" in messages["monkeypatch_torch"]
    assert "torch.backends.cudnn.benchmark" in messages["global_state_change"]


def test_seed_is_reject_other_global_state_is_flag() -> None:
    r = model("torch.manual_seed(0)\nreturn launch_relu(x)", extra="torch.backends.cudnn.benchmark = True\n")
    severities = {(f.severity) for f in r.findings if f.code == "global_state_change"}
    assert severities == {"reject", "flag"}


def test_findings_are_deduplicated_per_code_and_line() -> None:
    r = model("s = torch.cuda.Stream(); t = torch.cuda.Stream()\nreturn launch_relu(x)")
    assert len([f for f in r.findings if f.code == "cuda_stream_use"]) == 1


def test_fallback_in_helper_method_reached_from_handler() -> None:
    src = """\
    class ModelNew(nn.Module):
        def _torch_path(self, x):
            return F.gelu(x)

        def forward(self, x):
            try:
                return launch_relu(x)
            except Exception:
                return self._torch_path(x)
    """
    r = answer(src)
    assert "try_except_fallback" in codes(r)
    assert r.keeps_torch_op  # the handler is part of forward too


# ------------------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_cli_prints_and_writes_json(tmp_path: Path) -> None:
    code = tmp_path / "answer.py"
    code.write_text(HEADER + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                    "        return torch.relu(launch_relu(x))\n")
    out = tmp_path / "out" / "report.json"
    proc = subprocess.run([sys.executable, "-m", "workflow_scripts", "analyze", "--code", str(code),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    written = json.loads(out.read_text())
    assert printed == written
    assert written["keeps_torch_op"] is True and written["torch_ops_kept"] == ["torch:torch.relu"]
    assert written["launches_triton_kernel"] is True and written["findings"] == []


@pytest.mark.integration
def test_cli_syntax_error(tmp_path: Path) -> None:
    code = tmp_path / "answer.py"
    code.write_text("class ModelNew(:\n")
    proc = subprocess.run([sys.executable, "-m", "workflow_scripts", "analyze", "--code", str(code)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    report = json.loads(proc.stdout)
    assert report["parses"] is False and report["syntax_error"]


# ------------------------------------------------------------------------------------------------------------
# keeps_torch_op: a torch function passed as a value (issue 11)
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("forward, extra, init, op", [
    ("return launch_relu(list(map(torch.relu, [x]))[0])", "", "pass", "torch:torch.relu"),
    ("return launch_relu(functools.reduce(torch.add, [x, x]))", "import functools", "pass", "torch:torch.add"),
    ("return launch_relu({'f': torch.relu}['f'](x))", "", "pass", "torch:torch.relu"),
    ("return launch_relu(OPS['relu'](x))", "OPS = {'relu': torch.relu}", "pass", "torch:torch.relu"),
    ("return launch_relu(getattr(torch, 're' + 'lu')(x))", "", "pass", "torch:torch.<computed>"),
    ("return launch_relu(getattr(x, 're' + 'lu')())", "", "pass", "method:Tensor.<computed>"),
    ("return launch_relu(self.run(x))", "", "pass", "torch:torch.relu"),
    ("return launch_relu(Ops.f(x))", "class Ops:\n    f = torch.relu\n", "pass", "torch:torch.relu"),
    ("return launch_relu(importlib.import_module('torch').relu(x))", "import importlib", "pass", "torch:torch.relu"),
    ("return launch_relu(__import__('torch').relu(x))", "", "pass", "torch:torch.relu"),
    ("return launch_relu(sorted([x], key=torch.sum)[0])", "", "pass", "torch:torch.sum"),
    ("return launch_relu(list(map(self.act, [x]))[0])", "", "self.act = nn.GELU()", "layer:torch.nn.GELU"),
    ("return launch_relu(list(map(helper, [x]))[0])", "def helper(t):\n    return t.exp()\n", "pass",
     "method:Tensor.exp"),
])
def test_a_torch_function_passed_as_a_value_is_kept(forward: str, extra: str, init: str, op: str) -> None:
    methods = "def run(self, x, f=torch.relu):\n    return f(x)\n"
    r = model(forward, init=init, extra=extra, methods=methods)
    assert r.keeps_torch_op and op in r.torch_ops_kept, r.torch_ops_kept


def test_values_that_compute_nothing_are_not_kept() -> None:
    forward = """\
    n = functools.reduce(operator.mul, x.shape, 1)
    dims = list(map(int, x.shape))
    cfg = {"dtype": torch.float32, "alloc": torch.empty_like}
    out = torch.empty(dims, dtype=cfg["dtype"], device=x.device)
    blocks = sorted([{"BLOCK": 64}, {"BLOCK": 128}], key=lambda c: -c["BLOCK"])
    return launch_relu(x)
    """
    r = model(forward, extra="import functools\nimport operator")
    assert not r.keeps_torch_op, r.torch_ops_kept
