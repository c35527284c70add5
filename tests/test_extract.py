"""Tests of workflow_scripts.analysis.extract: the first fenced code block, as KernelBench's extract_first_code takes it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_scripts.analysis.extract import EXIT_NO_CODE, KERNELBENCH_LANGUAGE_TYPES, extract_code

ROOT = Path(__file__).resolve().parents[1]


def kernelbench_extract_first_code(output_string: str, code_language_types: list[str]) -> str | None:
    """Oracle: KernelBench src/kernelbench/utils.py extract_first_code, reproduced verbatim (logic only)."""
    trimmed = output_string.strip()
    code_match = re.search(r"```(.*?)```", trimmed, re.DOTALL)
    if code_match:
        code = code_match.group(1).strip()
        for code_type in code_language_types:
            if code.startswith(code_type):
                code = code[len(code_type) :].strip()
        return code
    return None


CASES = {
    "prose_around": "Here is my answer.\n\n```python\nimport torch\n\nx = 1\n```\n\nThat's it, it is fast.\n",
    "no_tag": "Text\n```\nimport torch\n```\n",
    "cpp_tag": "```cpp\n#include <x>\nint main() {}\n```",
    "py_tag_kept": "```py\nimport torch\n```",
    "capital_tag_kept": "```Python\nimport torch\n```",
    "python3_tag": "```python3\nimport torch\n```",
    "multiple_blocks": "First:\n```python\na = 1\n```\nThen:\n```python\nb = 2\n```\n",
    "unterminated": "Answer:\n```python\nimport torch\nclass ModelNew: pass\n",
    "unterminated_then_block": "```python\na = 1\n\nsee ```python\nb = 2\n```\n",
    "no_block": "I cannot write this kernel.",
    "empty_block": "```python\n```",
    "inline_backticks": "Use `x` and ``y``, then\n```python\nz = 3\n```",
    "indented_code": "```python\n    if True:\n        pass\n```",
    "crlf": "Hi\r\n```python\r\na = 1\r\n```\r\n",
    "fence_same_line": "```python a = 1```",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_kernelbench_exactly(name: str) -> None:
    text = CASES[name]
    assert extract_code(text) == kernelbench_extract_first_code(text, list(KERNELBENCH_LANGUAGE_TYPES))


def test_prose_before_and_after_is_dropped() -> None:
    assert extract_code(CASES["prose_around"]) == "import torch\n\nx = 1"


def test_language_tags_python_and_cpp_are_stripped() -> None:
    assert extract_code("```python\nx = 1\n```") == "x = 1"
    assert extract_code("```cpp\nint x;\n```") == "int x;"
    assert extract_code(CASES["no_tag"]) == "import torch"


def test_other_tags_stay_as_kernelbench_leaves_them() -> None:
    # KernelBench only strips the literal prefixes "python" and "cpp".
    assert extract_code(CASES["py_tag_kept"]) == "py\nimport torch"
    assert extract_code(CASES["capital_tag_kept"]) == "Python\nimport torch"
    assert extract_code(CASES["python3_tag"]) == "3\nimport torch"


def test_first_of_multiple_blocks() -> None:
    assert extract_code(CASES["multiple_blocks"]) == "a = 1"


def test_unterminated_block_gives_none() -> None:
    assert extract_code(CASES["unterminated"]) is None


def test_unterminated_block_closed_by_a_later_fence_is_taken_as_is() -> None:
    assert extract_code(CASES["unterminated_then_block"]) == "a = 1\n\nsee"


def test_no_block_gives_none() -> None:
    assert extract_code(CASES["no_block"]) is None
    assert extract_code("") is None


def test_empty_block_is_empty_code_not_none() -> None:
    assert extract_code(CASES["empty_block"]) == ""


def test_indentation_inside_is_kept_but_ends_trimmed() -> None:
    assert extract_code(CASES["indented_code"]) == "if True:\n        pass"


def test_custom_language_types() -> None:
    assert extract_code("```py\nx = 1\n```", language_types=("py",)) == "x = 1"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workflow_scripts", "extract", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.integration
def test_cli_writes_code(tmp_path: Path) -> None:
    completion = tmp_path / "c.txt"
    completion.write_text(CASES["prose_around"])
    out = tmp_path / "sub" / "code.py"
    proc = _run("--completion", str(completion), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "import torch\n\nx = 1"


@pytest.mark.integration
def test_cli_prints_code_without_out(tmp_path: Path) -> None:
    completion = tmp_path / "c.txt"
    completion.write_text(CASES["multiple_blocks"])
    proc = _run("--completion", str(completion))
    assert proc.returncode == 0
    assert proc.stdout == "a = 1\n"


@pytest.mark.integration
def test_cli_no_code_exits_3(tmp_path: Path) -> None:
    completion = tmp_path / "c.txt"
    completion.write_text(CASES["no_block"])
    out = tmp_path / "code.py"
    proc = _run("--completion", str(completion), "--out", str(out))
    assert proc.returncode == EXIT_NO_CODE == 3
    assert "no fenced code block" in proc.stderr
    assert not out.exists()
