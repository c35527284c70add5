#!/usr/bin/env python
"""CPU check of hand-written KernelBench Triton answers (raw completions) in the Triton interpreter.

For every answer file ``level<L>_<id>.txt`` (default: ``ours/`` next to this script):

1. the first fenced code block is extracted the way KernelBench (and ``workflow_scripts.analysis.extract``) does it;
2. the KernelBench problem ``<kernelbench>/level<L>/<id>_*.py`` is loaded with its module-level integer size
   constants SHRUNK: after every top-level assignment, each assigned name whose value is an ``int`` greater than
   ``--threshold`` (64) is replaced by the next value of ``--small`` (cycled, so e.g. M, N and K get different
   sizes), and values derived later (``bias_shape = (out_channels, 1, 1)``, ``input_shape = (num_classes,)``)
   follow automatically. Smaller ints (kernel sizes, channel counts <= 64, dims) are kept. ``--set NAME=VALUE``
   pins a constant to a given value instead (use it to exercise multi-block loops, e.g. ``--set dim=5000``);
3. the answer module is imported from a file (Triton needs the source), ``ModelNew`` must exist;
4. KernelBench's protocol: ``torch.manual_seed(42)`` before ``get_init_inputs()`` and before building each model
   (so parameters match), 5 trial seeds derived as ``manual_seed(42); randint(0, 2**32 - 1)`` x5, per trial seed
   -> ``get_inputs()`` -> seed -> forward under ``no_grad``; floating inputs cast to fp32, integer inputs keep
   their dtype (int64 targets stay int64);
5. outputs must match in structure, shape and dtype and ``torch.allclose(atol=1e-4, rtol=1e-4)``; in addition
   the answer must not mutate its inputs or return an input, and must launch at least one Triton kernel per
   forward (counted by wrapping the interpreter's launcher).

Each answer runs in its own subprocess (``TRITON_INTERPRET=1``) with a timeout. When the repository's
``workflow_scripts.analysis.static`` is importable, its verdict is shown too (``pure`` = forward keeps no torch op,
``hybrid`` = it keeps some, e.g. ``layer:Conv2d``; any ``reject`` finding fails the answer).

Usage::

    .venv/bin/python bench/kernelbench_answers/check_answers.py                       # every answer in ours/
    .venv/bin/python bench/kernelbench_answers/check_answers.py ours/level1_23.txt --set dim=5000 --set batch_size=3
    .venv/bin/python bench/kernelbench_answers/check_answers.py --kernelbench /path/to/KernelBench --json out.json

Exit status 0 when every answer passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DEFAULT_KERNELBENCH = Path("/work/shared/kernelbench")
DEFAULT_SMALL = "37,29,45,23,52,31,41,19"
ANSWER_RE = re.compile(r"^level(\d+)_(\d+)\.txt$")
FENCE_RE = re.compile(r"```(.*?)```", re.DOTALL)


# ------------------------------------------------------------------------------------------------ helpers

def extract_code(completion: str) -> str | None:
    """First fenced block, KernelBench style (strip, lazy ```...```, strip, cut a leading 'python'/'cpp' tag)."""
    m = FENCE_RE.search(completion.strip())
    if m is None:
        return None
    code = m.group(1).strip()
    for tag in ("python", "cpp"):
        if code.startswith(tag):
            code = code[len(tag):].strip()
    return code


def find_problem(kernelbench: Path, level: int, pid: int) -> Path:
    roots = [kernelbench / "KernelBench" / f"level{level}", kernelbench / f"level{level}"]
    for root in roots:
        if root.is_dir():
            hits = sorted(root.glob(f"{pid}_*.py"))
            if hits:
                return hits[0]
    raise FileNotFoundError(f"no problem level{level}/{pid}_*.py under {kernelbench}")


def shrink_source(src: str) -> str:
    """Insert ``name = __kb_shrink__('name', name)`` after every top-level assignment to a plain name."""
    tree = ast.parse(src)
    body: list[ast.stmt] = []
    for node in tree.body:
        body.append(node)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        names: list[str] = []
        for t in targets:
            if isinstance(t, ast.Name):
                names.append(t.id)
            elif isinstance(t, (ast.Tuple, ast.List)):
                names.extend(e.id for e in t.elts if isinstance(e, ast.Name))
        for name in names:
            body.extend(ast.parse(f"{name} = __kb_shrink__({name!r}, {name})").body)
    tree.body = body
    return ast.unparse(ast.fix_missing_locations(tree))


# ------------------------------------------------------------------------------------------------ worker

def worker(args: argparse.Namespace) -> dict:
    import importlib.util
    import types

    import torch

    result: dict = {"status": "error", "detail": "", "shrunk": {}, "launches": None, "max_abs_err": None}
    small = [int(v) for v in args.small.split(",") if v.strip()]
    overrides = {}
    for item in args.set or []:
        k, _, v = item.partition("=")
        overrides[k.strip()] = int(v)
    shrunk: dict[str, str] = {}
    counter = {"i": 0}

    def kb_shrink(name, value):
        if name in overrides:
            shrunk[name] = f"{value}->{overrides[name]}"
            return overrides[name]
        if type(value) is int and value > args.threshold:
            if name not in shrunk:
                new = small[counter["i"] % len(small)]
                counter["i"] += 1
                shrunk[name] = f"{value}->{new}"
            return int(shrunk[name].split("->")[1])
        return value

    # Problem module, shrunk.
    prob_src = Path(args.problem).read_text()
    prob = types.ModuleType("kb_problem")
    prob.__dict__["__kb_shrink__"] = kb_shrink
    prob.__file__ = args.problem
    exec(compile(shrink_source(prob_src), args.problem, "exec"), prob.__dict__)
    result["shrunk"] = shrunk

    # Answer module, from its file.
    spec = importlib.util.spec_from_file_location("kb_answer", args.code)
    ans = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(ans)
    except Exception as e:  # noqa: BLE001
        result.update(status="load_error", detail=f"{type(e).__name__}: {e}")
        return result
    if not hasattr(ans, "ModelNew"):
        result.update(status="no_model_new")
        return result

    # Count Triton launches (interpreter mode: InterpretedFunction.run; compiled mode: JITFunction.run).
    launches = {"n": 0}
    try:
        import triton.runtime.interpreter as tri_interp
        import triton.runtime.jit as tri_jit

        for cls in (getattr(tri_interp, "InterpretedFunction", None), getattr(tri_jit, "JITFunction", None)):
            if cls is None or not hasattr(cls, "run"):
                continue
            orig = cls.run

            def run(self, *a, __orig=orig, **kw):
                if not kw.get("warmup", False):
                    launches["n"] += 1
                return __orig(self, *a, **kw)

            cls.run = run
        counting = True
    except Exception:  # noqa: BLE001
        counting = False

    device = torch.device(args.device)

    def build(cls):
        torch.manual_seed(42)
        init_inputs = prob.get_init_inputs()
        torch.manual_seed(42)
        with torch.no_grad():
            m = cls(*init_inputs)
        return m.to(device=device, dtype=torch.float32)

    try:
        ref_model = build(prob.Model)
    except Exception as e:  # noqa: BLE001
        result.update(status="reference_init_error", detail=f"{type(e).__name__}: {e}")
        return result
    try:
        new_model = build(ans.ModelNew)
    except Exception as e:  # noqa: BLE001
        result.update(status="init_error", detail=f"{type(e).__name__}: {e}")
        return result

    torch.manual_seed(42)
    seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(args.trials)]

    def prep(xs):
        out = []
        for t in xs:
            if isinstance(t, torch.Tensor):
                t = t.to(device)
                if t.is_floating_point():
                    t = t.to(torch.float32)
            out.append(t)
        return out

    def flat(o):
        if isinstance(o, torch.Tensor):
            return [o]
        if isinstance(o, (list, tuple)):
            return [t for x in o for t in flat(x)]
        return [o]

    max_err = 0.0
    for trial, seed in enumerate(seeds):
        torch.manual_seed(seed)
        inputs = prep(prob.get_inputs())
        ref_inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        new_inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        with torch.no_grad():
            torch.manual_seed(seed)
            ref = ref_model(*ref_inputs)
            before = launches["n"]
            torch.manual_seed(seed)
            try:
                out = new_model(*new_inputs)
            except Exception as e:  # noqa: BLE001
                result.update(status="runtime_error", detail=f"trial {trial}: {type(e).__name__}: {str(e)[:500]}")
                return result
        n_launch = launches["n"] - before
        result["launches"] = n_launch if counting else None
        ref_l, out_l = flat(ref), flat(out)
        if len(ref_l) != len(out_l):
            result.update(status="structure_mismatch", detail=f"trial {trial}: {len(ref_l)} vs {len(out_l)} outputs")
            return result
        for r, o in zip(ref_l, out_l):
            if not isinstance(r, torch.Tensor):
                if r != o:
                    result.update(status="mismatch", detail=f"trial {trial}: non-tensor output {o!r} vs {r!r}")
                    return result
                continue
            if not isinstance(o, torch.Tensor):
                result.update(status="output_not_tensor", detail=f"trial {trial}: {type(o).__name__}")
                return result
            if tuple(r.shape) != tuple(o.shape):
                result.update(status="shape_mismatch", detail=f"trial {trial}: {tuple(r.shape)} vs {tuple(o.shape)}")
                return result
            if r.dtype != o.dtype:
                result.update(status="dtype_mismatch", detail=f"trial {trial}: {r.dtype} vs {o.dtype}")
                return result
            for t in new_inputs:
                if isinstance(t, torch.Tensor) and t.numel() and o.numel() and \
                        t.untyped_storage().data_ptr() == o.untyped_storage().data_ptr():
                    result.update(status="output_aliases_input", detail=f"trial {trial}")
                    return result
            if r.is_floating_point():
                ok = torch.allclose(r, o, atol=args.atol, rtol=args.rtol)
                if r.numel():
                    max_err = max(max_err, float((r - o).abs().max()))
            else:
                ok = torch.equal(r, o)
            if not ok:
                result.update(status="mismatch", detail=f"trial {trial}: max abs err {float((r - o).abs().max()):.3g}",
                              max_abs_err=max_err)
                return result
        for t0, t1 in zip(inputs, new_inputs):
            if isinstance(t0, torch.Tensor) and not torch.equal(t0, t1):
                result.update(status="inputs_mutated", detail=f"trial {trial}")
                return result
        if counting and n_launch == 0:
            result.update(status="no_triton_launch", detail=f"trial {trial}")
            return result
    result.update(status="correct", max_abs_err=max_err)
    return result


# ------------------------------------------------------------------------------------------------ parent

def static_verdict(code: str) -> dict | None:
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from workflow_scripts.analysis.static import analyze_source
    except Exception:  # noqa: BLE001
        return None
    finally:
        sys.path.pop(0)
    rep = analyze_source(code)
    return {
        "kind": "hybrid" if rep.keeps_torch_op else "pure",
        "torch_ops_kept": list(rep.torch_ops_kept),
        "launches_triton_kernel": rep.launches_triton_kernel,
        "reject": rep.reject_codes,
        "flags": rep.flag_codes,
    }


def check_one(answer: Path, args: argparse.Namespace, tmp: Path) -> dict:
    m = ANSWER_RE.match(answer.name)
    row: dict = {"answer": answer.name, "level": None, "problem_id": None}
    if not m:
        row.update(status="bad_name", detail="expected level<L>_<id>.txt")
        return row
    level, pid = int(m.group(1)), int(m.group(2))
    row.update(level=level, problem_id=pid)
    try:
        problem = find_problem(args.kernelbench, level, pid)
    except FileNotFoundError as e:
        row.update(status="no_problem", detail=str(e))
        return row
    row["problem"] = problem.stem
    code = extract_code(answer.read_text(encoding="utf-8"))
    if not code:
        row.update(status="no_code")
        return row
    code_file = tmp / f"answer_level{level}_{pid}.py"
    code_file.write_text(code + "\n", encoding="utf-8")
    row["static"] = static_verdict(code)

    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--problem", str(problem),
           "--code", str(code_file), "--small", args.small, "--threshold", str(args.threshold),
           "--trials", str(args.trials), "--atol", str(args.atol), "--rtol", str(args.rtol),
           "--device", args.device]
    for s in args.set or []:
        cmd += ["--set", s]
    env = dict(os.environ)
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=tmp)
    except subprocess.TimeoutExpired:
        row.update(status="timeout", seconds=round(time.time() - t0, 1))
        return row
    row["seconds"] = round(time.time() - t0, 1)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("KBRESULT ")]
    if proc.returncode != 0 or not lines:
        row.update(status="crash", detail=(proc.stderr or proc.stdout)[-1500:])
        return row
    row.update(json.loads(lines[-1][len("KBRESULT "):]))
    if row["status"] == "correct" and row.get("static") and row["static"]["reject"]:
        row["status"] = "rejected_static"
        row["detail"] = ",".join(row["static"]["reject"])
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("answers", nargs="*", type=Path, help="answer files (default: every level*_*.txt in --dir)")
    p.add_argument("--dir", type=Path, default=HERE / "ours")
    p.add_argument("--kernelbench", type=Path, default=DEFAULT_KERNELBENCH,
                   help="KernelBench checkout (holding KernelBench/level1 ...) or the KernelBench/ folder itself")
    p.add_argument("--small", default=DEFAULT_SMALL, help="comma-separated replacement sizes, cycled")
    p.add_argument("--threshold", type=int, default=64, help="shrink int constants greater than this")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="pin a module constant (repeatable)")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per answer")
    p.add_argument("--device", default="cpu", help="cpu (Triton interpreter) or cuda (compiled Triton)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--problem", help=argparse.SUPPRESS)
    p.add_argument("--code", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        try:
            res = worker(args)
        except Exception as e:  # noqa: BLE001
            import traceback
            res = {"status": "harness_error", "detail": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"}
        print("KBRESULT " + json.dumps(res), flush=True)
        return 0

    def sort_key(f: Path):
        m = ANSWER_RE.match(f.name)
        return (int(m.group(1)), int(m.group(2))) if m else (99, 0)

    answers = args.answers or sorted(args.dir.glob("level*_*.txt"), key=sort_key)
    if not answers:
        print(f"no answers found in {args.dir}", file=sys.stderr)
        return 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="kb_check_") as tmpd:
        for a in answers:
            row = check_one(a, args, Path(tmpd))
            rows.append(row)
            st = row.get("static") or {}
            print(f"  {a.name:<16} {row.get('status'):<20} {row.get('seconds', '')}s {st.get('kind', '?')}",
                  file=sys.stderr, flush=True)

    hdr = f"{'answer':<16} {'problem':<44} {'kind':<7} {'status':<16} {'max|err|':>9} {'launch':>6} {'sec':>6}  shrunk"
    print(hdr)
    print("-" * len(hdr))
    n_ok = 0
    for r in rows:
        st = r.get("static") or {}
        err = r.get("max_abs_err")
        shrunk = ",".join(f"{k}:{v}" for k, v in (r.get("shrunk") or {}).items())
        print(f"{r['answer']:<16} {str(r.get('problem', ''))[:44]:<44} {st.get('kind', '?'):<7} "
              f"{r['status']:<16} {'' if err is None else f'{err:.2e}':>9} {str(r.get('launches', '')):>6} "
              f"{str(r.get('seconds', '')):>6}  {shrunk}")
        if r["status"] != "correct" and r.get("detail"):
            print("    " + str(r["detail"]).replace("\n", "\n    "))
        if st.get("flags"):
            print("    static flags: " + ", ".join(st["flags"]))
        n_ok += r["status"] == "correct"
    print(f"\n{n_ok}/{len(rows)} correct")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
