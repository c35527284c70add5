"""`python -m workflow_scripts <tool> ...`: the by-hand tools in one place (rules call workflow_scripts.stages).

    evaluate       judge and time one answer against one problem
    baseline       time one problem's eager and torch.compile baselines
    environment    print or write the environment fingerprint
    extract        extract the code block of one completion
    analyze        static analysis of one answer
    prompt         render one problem's prompt (or all of them)
    kernelbench    list, validate or fetch a KernelBench checkout
    generate-cli   generate or import a command-line tool's answers into the completion cache
    generate-vllm  generate with vLLM outside the workflow
    summarize      summary JSON, tables and markdown from per-problem rows
    figures        the figures from rows and a summary
    explain        where one row or one summary number comes from, each link checked
    forget         drop chosen results from the store, so that the next run measures them anew
"""

from __future__ import annotations

import importlib
import sys

TOOLS = ("evaluate", "baseline", "environment", "extract", "analyze", "prompt", "kernelbench", "generate-cli",
         "generate-vllm", "summarize", "figures", "explain", "forget")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in TOOLS:
        sys.stdout.write(__doc__ or "")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    tool = importlib.import_module(f"workflow_scripts.tools.{argv[0].replace('-', '_')}")
    return tool.main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
