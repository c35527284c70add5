"""Extraction of an answer's code from a completion: the first fenced code block, exactly as KernelBench takes it.

Mirrors ``extract_first_code(output_string, code_language_types)`` of KernelBench's ``src/kernelbench/utils.py``
as called by ``scripts/generate_samples.py`` with ``["python", "cpp"]``:

1. the completion is stripped of surrounding whitespace;
2. the first non-greedy match of ``\\`\\`\\`(.*?)\\`\\`\\``` (DOTALL) is taken: the text between the first two runs of
   three backticks, so an unterminated block yields no code (unless a later fence closes it);
3. that text is stripped;
4. for each language type in order (``python`` then ``cpp``), if the code *starts with* it, the tag is cut off
   and the rest stripped again. Only these literal, case-sensitive prefixes are removed: a block tagged
   ``py`` or ``Python`` keeps its tag as the first line, and ``python3`` leaves a ``3`` — as in KernelBench;
5. no match -> ``None``. An empty block gives ``""`` (KernelBench returns it too; it then fails to load).

CLI: ``python -m workflow_scripts extract --completion FILE [--out CODE.py]`` prints the code (or writes it, byte
for byte, to ``--out``); without any code it prints a message on stderr, writes nothing and exits with 3.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# KernelBench's generate_samples.py passes these to extract_first_code.
KERNELBENCH_LANGUAGE_TYPES: tuple[str, ...] = ("python", "cpp")
EXIT_NO_CODE = 3

# Same pattern and flags as KernelBench: lazy match between the first two ``` runs, across lines.
_FIRST_BLOCK_RE = re.compile(r"```(.*?)```", re.DOTALL)


def extract_code(completion: str, language_types: Sequence[str] = KERNELBENCH_LANGUAGE_TYPES) -> str | None:
    """The first fenced code block of ``completion`` as KernelBench extracts it, or ``None`` without one."""
    trimmed = completion.strip()
    match = _FIRST_BLOCK_RE.search(trimmed)
    if match is None:
        return None
    code = match.group(1).strip()
    # Sequential, like KernelBench: each tag is tested against the result of the previous step.
    for code_type in language_types:
        if code.startswith(code_type):
            code = code[len(code_type) :].strip()
    return code
