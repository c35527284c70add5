"""`python -m workflow_scripts environment`: the by-hand command line of evaluation/environment."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workflow_scripts.evaluation.environment import TF32_MODES, fingerprint, fingerprint_key


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workflow_scripts environment", description="Print or write the environment fingerprint.")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--gpu-index", default=None)
    ap.add_argument("--tf32", choices=list(TF32_MODES), default="pytorch_default")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    fp = fingerprint(a.device, a.gpu_index, a.tf32)
    fp["key"] = fingerprint_key(fp)
    text = json.dumps(fp, indent=2, sort_keys=True)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
