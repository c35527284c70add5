# Configuration validation (a JSON schema) and the input functions every stage shares.
import json
import shlex
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")

validate(config, schema="../schemas/config.schema.yaml")

RESULTS = config["results_dir"]
STORE = config["store"]
LOCKS = f"{RESULTS}/.locks"
SUITE = config["suite"]["path"]
LEVELS = config["suite"]["levels"]
EVAL = config["evaluation"]
DEVICE = EVAL["device"]
MODELS = list(config["models"])
for _name in [config["summary"]["reference"], *(config["summary"]["compare"] or [])]:
    if _name not in config["models"]:
        raise WorkflowError(f"summary names model {_name!r}, which is not under models: (models: {MODELS})")
# Jobs run the interpreter that runs Snakemake unless a conda env supplies its own `python`.
PYTHON = "python" if "conda" in str(workflow.deployment_settings.deployment_method).lower() else sys.executable

_PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")


def _scan_suite():
    """(level, id) -> problem file, from file names only: parse time stays fast at 200 problems x 15 models."""
    suite = Path(SUITE)
    if not suite.is_dir():
        if config["suite"]["fetch"]:
            return None  # the fetch_kernelbench rule creates it; run again afterwards
        raise WorkflowError(
            f"suite.path {SUITE!r} does not exist. Point suite.path at a KernelBench checkout "
            f"(levels {LEVELS}) or set suite.fetch: true with suite.revision to download it."
        )
    only = {int(k): set(v) for k, v in (config["suite"]["only"] or {}).items()}
    found = {}
    for level in LEVELS:
        level_dir = suite / "KernelBench" / f"level{level}"
        if not level_dir.is_dir():
            raise WorkflowError(f"suite {SUITE!r} has no level {level}: {level_dir} is missing")
        for path in sorted(level_dir.iterdir()):
            match = _PROBLEM_FILE.match(path.name)
            if match and (not only or int(match.group(1)) in only.get(level, ())):
                found[(level, int(match.group(1)))] = str(path)
    if not found:
        raise WorkflowError(f"suite {SUITE!r} holds no problems for levels {LEVELS}")
    return dict(sorted(found.items()))


PROBLEMS = _scan_suite()
SUITE_FILES = sorted(PROBLEMS.values()) if PROBLEMS else []
PROMPT_FILES = sorted(str(p) for p in Path(SUITE, "src", "kernelbench", "prompts").rglob("*") if p.is_file()) if PROBLEMS else []


def optional_flag(flag, value):
    """`--flag 'value'` (JSON for mappings), or nothing when the value is unset."""
    if value in (None, "", {}, []):
        return ""
    return f"{flag} {shlex.quote(value if isinstance(value, str) else json.dumps(value, sort_keys=True))}"


def models_of_kind(*kinds):
    return [name for name, model in config["models"].items() if model["kind"] in kinds]


def model_regex(*kinds):
    names = models_of_kind(*kinds)
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


def problem_file(wildcards):
    return PROBLEMS[(int(wildcards.level), int(wildcards.problem_id))]


def problem_keys():
    return [f"level{level}_{pid}" for level, pid in PROBLEMS]


def evaluation_files(model):
    return [f"{RESULTS}/evaluations/{model}/{key}.json" for key in problem_keys()]


def eval_settings():
    """The EvalConfig fields, passed to the jobs as JSON (its values are part of every evaluation key)."""
    return json.dumps({
        "device": DEVICE, "timeout_s": EVAL["timeout_s"], "seed": EVAL["seed"],
        "correctness_trials": EVAL["correctness_trials"], "atol": EVAL["atol"], "rtol": EVAL["rtol"],
        "timing_trials": EVAL["timing_trials"], "warmup": EVAL["warmup"],
        "require_triton": EVAL["require_triton"], "tf32": EVAL["tf32"], "gpus": EVAL["gpus"],
    }, sort_keys=True)


def gpu_resources():
    """GPU jobs take one unit of `gpu` (bound it with --resources gpu=N) and their memory in gpu_mem_gb."""
    if DEVICE != "cuda":
        return {"gpu": 0, "gpu_mem_gb": 0}
    return {"gpu": 1, "gpu_mem_gb": int(EVAL["memory_gb"])}


def final_targets():
    if PROBLEMS is None:
        return [f"{SUITE}/.kernelbench_revision"]
    return [
        f"{RESULTS}/evaluations.parquet",
        f"{RESULTS}/summary.json",
        f"{RESULTS}/summary.md",
        f"{RESULTS}/tables/levels.parquet",
    ]


def figure_names():
    """The figures workflow_scripts.figures draws: one fast_p curve per level, then the cross-level figures."""
    if PROBLEMS is None:
        return []
    return [f"fast_p_level{level}" for level in sorted({level for level, _ in PROBLEMS})] + [
        "bootstrap_forest", "level2_strategy", "correct_compiled"]


def _refresh_environment_file():
    """Timings are reused only while the environment matches: a changed Python, torch, Triton, GPU or driver
    removes the recorded fingerprint, so the environment rule re-measures it and every timing is re-keyed.
    Cheap on purpose (package metadata and one nvidia-smi query): it runs each time the workflow is parsed."""
    import importlib.metadata
    import platform
    import subprocess

    path = Path(RESULTS, "environment", f"{DEVICE}.json")
    if not path.exists():
        return
    recorded = json.loads(path.read_text())
    live = {"python": platform.python_version()}
    for package in ("torch", "triton"):
        try:
            live[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            live[package] = None
    if DEVICE == "cuda":
        try:
            query = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout.splitlines()[0].split(", ")
            live["gpu_name"], live["driver"] = query[0].strip(), query[1].strip()
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    # Under --sdm conda the jobs' environment, not Snakemake's, runs torch: compare only what is visible here.
    changed = {k: (recorded.get(k), v) for k, v in live.items() if v is not None and recorded.get(k) != v}
    if changed:
        sys.stderr.write(f"environment changed since {path} was recorded ({changed}); re-measuring it\n")
        path.unlink()


_refresh_environment_file()
