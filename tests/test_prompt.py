"""Prompt rendering (workflow_scripts.suite.prompt): byte-identical to KernelBench's TOML prompt constructor."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_scripts.suite.kernelbench import list_problems
from workflow_scripts.suite.prompt import (
    SYSTEM_MESSAGE,
    PromptError,
    render_all,
    render_problem_prompt,
    render_prompt,
)

REPO = Path(__file__).resolve().parents[1]
DEMO_SUITE = REPO / "demo" / "suite"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "workflow_scripts", "prompt", *args], cwd=REPO, env=env,
                          capture_output=True, timeout=300)


# ------------------------------------------------------------------------------------------------ real checkout


def test_level1_19_byte_identical(kb_dir: Path) -> None:
    expected = (kb_dir / "expected_prompts" / "level1_19_ReLU.txt").read_bytes()
    assert render_problem_prompt(kb_dir, 1, 19).encode("utf-8") == expected
    # The same through the explicit defaults and through render_prompt on the raw source.
    src = (kb_dir / "KernelBench" / "level1" / "19_ReLU.py").read_text(encoding="utf-8")
    assert render_prompt(kb_dir, src, backend="triton", option="one_shot", precision="fp32").encode() == expected
    assert render_prompt(kb_dir, src, backend="TRITON", option="ONE_SHOT").encode() == expected  # lower-cased
    assert render_prompt(kb_dir, src, precision=None).encode() == expected  # meta.default_precision is fp32


def test_all_200_problems_render(kb_dir: Path) -> None:
    problems = list_problems(kb_dir)
    assert len(problems) == 200
    head = render_problem_prompt(kb_dir, 1, 19).split("Example:")[0]
    for p in problems:
        src = (kb_dir / p.path).read_text(encoding="utf-8")
        prompt = render_problem_prompt(kb_dir, p.level, p.problem_id)
        assert src in prompt, p.key
        assert prompt.startswith(head) and "Example:" in prompt
        assert prompt.endswith("code!\n") and not prompt.endswith("\n\n")
        assert "Note: The kernels should be optimized for FP32 (32-bit floating point) precision." in prompt
        # The source sits verbatim after the arch header, with any trailing newline of the file kept.
        assert f"You are given the following architecture:\n\n\n{src}\n\nNote:" in prompt, p.key


def test_other_options_render(kb_dir: Path) -> None:
    src = (kb_dir / "KernelBench" / "level1" / "19_ReLU.py").read_text(encoding="utf-8")
    zero = render_prompt(kb_dir, src, option="zero_shot")
    assert "Example" not in zero and src in zero
    # Triton has no few-shot pairs: KernelBench falls back to the one-shot example, so the bytes are the same.
    assert render_prompt(kb_dir, src, option="few_shot") == render_prompt(kb_dir, src, option="one_shot")
    bf16 = render_prompt(kb_dir, src, precision="bf16")
    assert "optimized for BF16 (bfloat16) precision" in bf16


@pytest.mark.integration
def test_cli_prints_exact_bytes(kb_dir: Path) -> None:
    r = run_cli("--kernelbench", str(kb_dir), "--level", "1", "--problem", "19")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (kb_dir / "expected_prompts" / "level1_19_ReLU.txt").read_bytes()
    r = run_cli("--kernelbench", str(kb_dir), "--level", "2", "--problem", "17")
    assert r.returncode == 0, r.stderr
    assert r.stdout == render_problem_prompt(kb_dir, 2, 17).encode("utf-8")


@pytest.mark.integration
def test_cli_all_real_checkout(kb_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "prompts"
    r = run_cli("--kernelbench", str(kb_dir), "--all", "--out-dir", str(out))
    assert r.returncode == 0, r.stderr
    index = json.loads((out / "index.json").read_text())
    assert len(index["prompts"]) == 200
    assert (out / "level1_19.txt").read_bytes() == (kb_dir / "expected_prompts" / "level1_19_ReLU.txt").read_bytes()
    for e in index["prompts"]:
        data = (out / e["prompt_file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == e["prompt_sha256"]
        assert e["prompt_file"] == f"level{e['level']}_{e['problem_id']}.txt"
    assert sorted(p.name for p in out.iterdir()) == sorted([e["prompt_file"] for e in index["prompts"]] + ["index.json"])


# ------------------------------------------------------------------------------------------------ synthetic suite

TOML = '''
[meta]
default_precision = "fp32"

[shared]
problem_statement = """
Write {backend_display} for the architecture.
"""
instruction = """
Name it ModelNew using {backend_display}!
"""
few_shot_example_arch = "src/kernelbench/prompts/ex.py"

[backends.triton]
backend_display = "Triton kernels"
one_shot_new_arch = "src/kernelbench/prompts/ex_new.py"

[backends.cuda]
backend_display = "CUDA operators"
one_shot_new_arch = "src/kernelbench/prompts/ex_new.py"
few_shot_examples = [
    ["src/kernelbench/prompts/a.py", "src/kernelbench/prompts/a_new.py"],
    ["src/kernelbench/prompts/b.py", "src/kernelbench/prompts/b_new.py"],
]

[backends.broken]
backend_display = "Broken"
one_shot_new_arch = "src/kernelbench/prompts/absent.py"

[precision.fp32]
precision_display = "FP32"

[precision.bf16]

[templates.common]
arch_block = """
Given:


{ref_arch_src}

"""
examples_block = """
{examples_intro}

{examples_entries}
"""
example_intro_one_shot = """
One example with {backend_display}:
"""
example_intro_few_shot = """
Examples with {backend_display}:
"""
example_entry_template = """
{example_label}

In:

{input_code}

Out ({backend_display}):

{output_code}
"""
precision_note = """
Precision: {precision_display}.
"""

[options.zero_shot]
components = ["problem_statement", "arch_block", "precision_note", "instruction"]

[options.one_shot]
components = ["problem_statement", "examples_block", "arch_block", "precision_note", "instruction"]
requires_example = "one_shot"

[options.few_shot]
components = ["problem_statement", "examples_block", "arch_block", "precision_note", "instruction"]
requires_example = "few_shot"
'''

SRC = "x = {'a': 1}  # {ref_arch_src} stays literal\n"

# Worked out by hand from KernelBench's assembly rules (see render_prompt's docstring).
EXPECTED_ONE_SHOT = (
    "Write Triton kernels for the architecture.\n"
    "\n"
    "One example with Triton kernels:\n"
    "\n"
    "Example:\n"
    "\n"
    "In:\n"
    "\n"
    "EX\n"  # example file verbatim, its trailing newline kept ...
    "\n"
    "\n"
    "Out (Triton kernels):\n"
    "\n"
    "EX_NEW\n"  # ... except at the end of the entries, which are stripped
    "\n"
    "Given:\n"
    "\n"
    "\n"
    f"{SRC}"  # the source's own trailing newline gives the extra blank line below
    "\n"
    "\n"
    "Precision: FP32.\n"
    "\n"
    "Name it ModelNew using Triton kernels!\n"
)


@pytest.fixture()
def suite(tmp_path: Path) -> Path:
    prompts = tmp_path / "src" / "kernelbench" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "prompts.toml").write_text(TOML)
    for name, text in {"ex.py": "EX\n", "ex_new.py": "EX_NEW\n", "a.py": "A\n", "a_new.py": "A_NEW\n",
                       "b.py": "B", "b_new.py": "B_NEW\n"}.items():
        (prompts / name).write_text(text)
    for level, names in {1: ["1_First.py", "2_Second.py"], 2: ["1_Fused.py"]}.items():
        d = tmp_path / "KernelBench" / f"level{level}"
        d.mkdir(parents=True)
        for n in names:
            (d / n).write_text(f"# {n}\n{SRC}")
    return tmp_path


def test_one_shot_assembly_bytes(suite: Path) -> None:
    assert render_prompt(suite, SRC) == EXPECTED_ONE_SHOT


def test_zero_shot_and_precisions(suite: Path) -> None:
    zero = render_prompt(suite, "S", option="zero_shot")
    assert zero == ("Write Triton kernels for the architecture.\n\nGiven:\n\n\nS\n\nPrecision: FP32.\n\n"
                    "Name it ModelNew using Triton kernels!\n")
    assert "Precision: BF16." in render_prompt(suite, "S", option="zero_shot", precision="bf16")  # no display name
    assert render_prompt(suite, "S", option="zero_shot", precision=None) == zero  # meta default
    assert render_prompt(suite, "S", option="zero_shot", precision="") == zero


def test_few_shot(suite: Path) -> None:
    few = render_prompt(suite, "S", backend="cuda", option="few_shot")
    assert few.startswith("Write CUDA operators for the architecture.\n\nExamples with CUDA operators:\n\n"
                          "Example 1:\n\nIn:\n\nA\n\n\nOut (CUDA operators):\n\nA_NEW\n\n\nExample 2:\n\nIn:\n\nB\n\n"
                          "Out (CUDA operators):\n\nB_NEW\n\nGiven:")
    # Without few-shot pairs the backend falls back to its one-shot example.
    assert render_prompt(suite, SRC, option="few_shot") == EXPECTED_ONE_SHOT


def test_errors_are_clear(suite: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    with pytest.raises(PromptError, match=r"unknown backend 'metal'; prompts.toml defines: broken, cuda, triton"):
        render_prompt(suite, "S", backend="metal")
    with pytest.raises(PromptError, match=r"unknown option 'two_shot'; prompts.toml defines: few_shot, one_shot"):
        render_prompt(suite, "S", option="two_shot")
    with pytest.raises(PromptError, match=r"unknown precision 'fp8'"):
        render_prompt(suite, "S", precision="fp8")
    with pytest.raises(PromptError, match=r"absent.py"):
        render_prompt(suite, "S", backend="broken")
    with pytest.raises(PromptError, match=r"does not exist"):
        render_prompt(tmp_path_factory.mktemp("empty"), "S")


def test_render_problem_and_all(suite: Path, tmp_path: Path) -> None:
    src = (suite / "KernelBench" / "level1" / "2_Second.py").read_text()
    assert render_problem_prompt(suite, 1, 2) == render_prompt(suite, src)
    index = render_all(suite, tmp_path / "out")
    assert [(e["level"], e["problem_id"], e["problem"]) for e in index["prompts"]] == \
        [(1, 1, "First"), (1, 2, "Second"), (2, 1, "Fused")]
    assert (tmp_path / "out" / "level1_2.txt").read_bytes() == render_prompt(suite, src).encode()
    assert index["system_message"] == SYSTEM_MESSAGE and index["backend"] == "triton"


@pytest.mark.integration
def test_cli_synthetic(suite: Path, tmp_path: Path) -> None:
    r = run_cli("--kernelbench", str(suite), "--level", "1", "--problem", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == render_problem_prompt(suite, 1, 1).encode()
    assert r.stdout.endswith(b"!\n") and not r.stdout.endswith(b"\n\n")  # no newline added by the CLI
    out = tmp_path / "one.txt"
    assert run_cli("--kernelbench", str(suite), "--level", "1", "--problem", "1", "--out", str(out)).returncode == 0
    assert out.read_bytes() == r.stdout
    r = run_cli("--kernelbench", str(suite), "--all", "--out-dir", str(tmp_path / "all"), "--levels", "2")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["index.json", "level2_1.txt"]
    r = run_cli("--kernelbench", str(suite), "--level", "1", "--problem", "1", "--backend", "metal")
    assert r.returncode == 1 and b"unknown backend 'metal'" in r.stderr
    r = run_cli("--kernelbench", str(suite), "--level", "1", "--problem", "9")
    assert r.returncode == 1 and b"no problem 9 in level 1" in r.stderr


def test_the_system_message_is_kernelbench_s() -> None:
    assert SYSTEM_MESSAGE == "You are a helpful assistant"  # KernelBench's query_server default, no period


def test_demo_suite_renders() -> None:
    # The bundled demo suite has its own reduced prompts.toml; the same code must render it.
    if not (DEMO_SUITE / "src" / "kernelbench" / "prompts" / "prompts.toml").is_file():
        pytest.skip("demo/suite not present")
    problems = list_problems(DEMO_SUITE, levels=sorted(
        int(d.name[len("level"):]) for d in (DEMO_SUITE / "KernelBench").glob("level*") if d.is_dir()))
    assert problems
    for p in problems:
        prompt = render_problem_prompt(DEMO_SUITE, p.level, p.problem_id)
        assert p.source(DEMO_SUITE) in prompt and prompt.endswith("\n") and not prompt.endswith("\n\n")
