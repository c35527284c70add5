"""Checks of the bundled demo suite (demo/suite) and demo completions (demo/completions)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo"
SUITE = DEMO / "suite"
COMPLETIONS = DEMO / "completions"
MODELS = ["expert", "sft_like", "hybrid", "weak", "twin", "hostile"]
# The one (model, problem) deliberately left without a completion file (status missing_completion), and the problems
# the hostile model does not attack.
HOSTILE = {"level1_1", "level1_2"}
FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def problem_files() -> list[Path]:
    files = sorted(SUITE.glob("KernelBench/level*/*.py"))
    assert files, "demo suite has no problems"
    return files


def key_of(path: Path) -> str:
    level = int(path.parent.name[len("level"):])
    pid = int(path.name.split("_", 1)[0])
    return f"level{level}_{pid}"


PROBLEMS = problem_files()
KEYS = [key_of(p) for p in PROBLEMS]
MISSING = {("weak", "level2_4")} | {("hostile", key) for key in KEYS if key not in HOSTILE}


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def first_code(text: str) -> str | None:
    m = FENCE_RE.search(text)
    return m.group(2) if m else None


# --------------------------------------------------------------------------------------------------------
# Suite
# --------------------------------------------------------------------------------------------------------


def test_suite_layout():
    levels = {p.parent.name for p in PROBLEMS}
    assert levels == {"level1", "level2"}
    assert sum(p.parent.name == "level1" for p in PROBLEMS) >= 8
    assert sum(p.parent.name == "level2" for p in PROBLEMS) >= 4
    assert len(set(KEYS)) == len(KEYS)
    for p in PROBLEMS:
        assert re.fullmatch(r"\d+_[A-Za-z0-9_]+\.py", p.name), p.name
    assert (SUITE / "README.md").is_file()


@pytest.mark.parametrize("path", PROBLEMS, ids=KEYS)
def test_problem_defines_model_and_runs_on_cpu(path: Path):
    src = path.read_text()
    assert ".cuda(" not in src and "device=" not in src, "inputs must be CPU tensors"
    assert "import torch\n" in src and "import torch.nn as nn\n" in src
    mod = load(path, f"demo_problem_{key_of(path)}")
    assert isinstance(mod.Model, type) and issubclass(mod.Model, torch.nn.Module)
    init_inputs = mod.get_init_inputs()
    assert isinstance(init_inputs, list)
    torch.manual_seed(42)
    model = mod.Model(*init_inputs)
    inputs = mod.get_inputs()
    assert isinstance(inputs, list) and inputs
    for x in inputs:
        assert isinstance(x, torch.Tensor) and x.device.type == "cpu"
    assert sum(x.numel() for x in inputs) <= 20000, "demo problems must stay small"
    with torch.no_grad():
        out = model(*inputs)
    assert isinstance(out, torch.Tensor) and torch.isfinite(out).all()


def test_integer_input_problem_keeps_int64():
    path = SUITE / "KernelBench/level1/8_CrossEntropyIntTargets.py"
    mod = load(path, "demo_problem_ce")
    logits, targets = mod.get_inputs()
    assert logits.dtype == torch.float32 and targets.dtype == torch.int64


def test_prompts_toml_structure_and_example_pair():
    tomllib = pytest.importorskip("tomllib")
    toml_path = SUITE / "src/kernelbench/prompts/prompts.toml"
    cfg = tomllib.loads(toml_path.read_text())
    for k in ("problem_statement", "instruction", "few_shot_example_arch"):
        assert k in cfg["shared"]
    assert {"backend_display", "one_shot_new_arch"} <= set(cfg["backends"]["triton"])
    assert "precision_display" in cfg["precision"]["fp32"]
    common = cfg["templates"]["common"]
    for k in ("arch_block", "examples_block", "example_intro_one_shot", "example_entry_template", "precision_note"):
        assert k in common
    assert cfg["options"]["one_shot"]["requires_example"] == "one_shot"
    for c in cfg["options"]["one_shot"]["components"]:
        assert c in cfg["shared"] or c in common
    ex = SUITE / cfg["shared"]["few_shot_example_arch"]
    ex_new = SUITE / cfg["backends"]["triton"]["one_shot_new_arch"]
    assert ex.name == "model_ex_mul.py" and ex_new.name == "model_new_ex_mul_triton.py"
    assert "a * b" in ex.read_text()
    tree = ast.parse(ex_new.read_text())
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


@pytest.mark.integration
def test_example_pair_agrees_in_interpreter(tmp_path: Path):
    prompts = SUITE / "src/kernelbench/prompts"
    script = (
        "import sys, torch; sys.path.insert(0, sys.argv[1])\n"
        "import model_ex_mul as r, model_new_ex_mul_triton as n\n"
        "a, b = r.get_inputs()\n"
        "assert torch.allclose(r.Model()(a, b), n.ModelNew()(a, b))\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", script, str(prompts)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**_env(), "TRITON_INTERPRET": "1"})
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


def _env() -> dict:
    import os

    return dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def test_nothing_copied_from_kernelbench():
    kb = ROOT.parent / "shared" / "kernelbench"
    if not kb.is_dir():
        pytest.skip("no KernelBench copy beside the checkout")
    theirs = {hashlib.sha256(p.read_bytes()).hexdigest() for p in kb.rglob("*.py")}
    theirs |= {hashlib.sha256(p.read_bytes()).hexdigest() for p in kb.rglob("*.toml")}
    for p in list(DEMO.rglob("*.py")) + list(DEMO.rglob("*.toml")):
        assert hashlib.sha256(p.read_bytes()).hexdigest() not in theirs, p


# --------------------------------------------------------------------------------------------------------
# Completions
# --------------------------------------------------------------------------------------------------------


def test_model_directories():
    assert sorted(d.name for d in COMPLETIONS.iterdir() if d.is_dir()) == sorted(MODELS)


@pytest.mark.parametrize("model", MODELS)
def test_every_problem_has_a_completion(model: str):
    for key in KEYS:
        f = COMPLETIONS / model / f"{key}.txt"
        if (model, key) in MISSING:
            assert not f.exists(), f"{f} is meant to be missing"
        else:
            assert f.is_file(), f"missing {f}"
    extra = {p.stem for p in (COMPLETIONS / model).glob("*.txt")} - set(KEYS)
    assert not extra, extra


@pytest.mark.parametrize("model", MODELS)
def test_meta_json(model: str):
    meta_path = COMPLETIONS / model / "meta.json"
    if model in ("weak", "hostile"):
        assert not meta_path.exists(), f"{model} reports no token counts"
        return
    meta = json.loads(meta_path.read_text())
    assert set(meta) == set(KEYS)
    for key, entry in meta.items():
        tokens = entry["completion_tokens"]
        assert isinstance(tokens, int) and tokens > 0
        text = (COMPLETIONS / model / f"{key}.txt").read_text()
        assert tokens == len(text.split())


def test_expected_statuses_cover_everything():
    from_file = json.loads((DEMO / "expected_statuses.json").read_text())
    allowed = {
        "missing_completion", "no_code", "rejected_static", "load_error", "no_model_new", "init_error",
        "runtime_error", "timeout", "crash", "shape_mismatch", "dtype_mismatch", "mismatch", "no_triton_launch",
        "rejected_runtime", "correct",
    }
    for device in ("cpu", "cuda"):
        exp = from_file[device]
        assert set(exp) == set(MODELS)
        for model in MODELS:
            assert set(exp[model]) == set(KEYS)
            assert set(exp[model].values()) <= allowed
        assert all(v == "correct" for v in exp["expert"].values())
        assert all(v == "correct" for v in exp["hybrid"].values())
        weak = set(exp["weak"].values())
        assert {"no_code", "load_error", "no_model_new", "mismatch", "runtime_error", "init_error",
                "shape_mismatch", "timeout", "crash", "no_triton_launch", "missing_completion"} <= weak
        assert "correct" not in weak
        for model in ("weak", "hostile"):
            missing = {k for k, v in exp[model].items() if v == "missing_completion"}
            assert missing == {k for m, k in MISSING if m == model}, model


def test_answers_use_triton_on_cpu_tensors():
    for model in MODELS:
        for key in KEYS:
            f = COMPLETIONS / model / f"{key}.txt"
            if not f.exists():
                continue
            code = first_code(f.read_text())
            if code is None:
                continue
            assert "is_cuda" not in code and ".cuda(" not in code, f
            assert "import triton\n" in code and "import triton.language as tl\n" in code, f
            assert "autotune" not in code and "libdevice" not in code and "tl.extra" not in code, f


def test_weak_no_code_completion_has_no_fence():
    texts = {key: (COMPLETIONS / "weak" / f"{key}.txt") for key in KEYS}
    no_code = [k for k, f in texts.items() if f.exists() and first_code(f.read_text()) is None]
    assert no_code == ["level1_2"]


def test_twin_shares_code_with_expert():
    same_code, same_file = [], []
    for key in KEYS:
        t = (COMPLETIONS / "twin" / f"{key}.txt").read_text()
        e = (COMPLETIONS / "expert" / f"{key}.txt").read_text()
        if first_code(t) == first_code(e):
            same_code.append(key)
        if t == e:
            same_file.append(key)
    assert len(same_code) >= 2
    assert set(same_file) < set(same_code), "some shared code should sit under different prose"
    assert len(same_code) < len(KEYS)


# --------------------------------------------------------------------------------------------------------
# AST check: expert forward() holds no torch math
# --------------------------------------------------------------------------------------------------------

ALLOWED_TORCH = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "full", "tensor"}
TENSOR_MATH_METHODS = {
    "sum", "mean", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "relu_", "softmax", "matmul", "mm",
    "bmm", "add", "add_", "mul", "mul_", "sub", "div", "pow", "amax", "max", "min", "clamp", "logsumexp", "norm",
    "abs", "neg", "var", "std", "erf", "gelu", "silu", "conv2d", "linear", "t", "prod", "cumsum",
}


def torch_math_in_forward(code: str) -> list[str]:
    """Torch math reached from ModelNew.forward (and module functions it calls, transitively)."""
    tree = ast.parse(code)
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    jitted = {name for name, f in funcs.items()
              if any("jit" in ast.unparse(d) for d in f.decorator_list)}
    found: list[str] = []
    todo, seen = [methods["forward"]], set()
    while todo:
        fn = todo.pop()
        if fn.name in seen:
            continue
        seen.add(fn.name)
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                found.append("@")
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in funcs and f.id not in jitted:
                todo.append(funcs[f.id])
            if isinstance(f, ast.Attribute):
                chain = ast.unparse(f)
                root = chain.split(".", 1)[0]
                if root == "torch" and f.attr not in ALLOWED_TORCH:
                    found.append(chain)
                elif root == "F":
                    found.append(chain)
                elif isinstance(f.value, ast.Name) and f.value.id == "self":
                    if f.attr in methods:
                        todo.append(methods[f.attr])
                    else:
                        found.append(chain)  # self.<module>(...)
                elif f.attr in TENSOR_MATH_METHODS and root not in ("triton", "tl", "math"):
                    found.append(chain)
    return found


@pytest.mark.parametrize("key", KEYS)
def test_expert_forward_is_pure_triton(key: str):
    code = first_code((COMPLETIONS / "expert" / f"{key}.txt").read_text())
    assert torch_math_in_forward(code) == []
    assert "input_precision=\"ieee\"" in code or "tl.dot" not in code


@pytest.mark.parametrize("key", KEYS)
def test_hybrid_forward_keeps_a_torch_op(key: str):
    code = first_code((COMPLETIONS / "hybrid" / f"{key}.txt").read_text())
    assert torch_math_in_forward(code), "hybrid answers keep a PyTorch op"


# --------------------------------------------------------------------------------------------------------
# check_demo.py, on a few answers (the full run takes about two minutes)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_check_demo_subset(tmp_path: Path):
    out = tmp_path / "res.json"
    cmd = [sys.executable, str(DEMO / "check_demo.py"), "-m", "expert", "-m", "weak",
           "-p", "level1_1", "-p", "level1_4", "-p", "level2_4", "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env())
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {(r["model"], r["problem"]): r["status"] for r in json.loads(out.read_text())}
    assert rows == {
        ("expert", "level1_1"): "correct", ("expert", "level1_4"): "correct", ("expert", "level2_4"): "correct",
        ("weak", "level1_1"): "mismatch", ("weak", "level1_4"): "load_error",
        ("weak", "level2_4"): "missing_completion",
    }
