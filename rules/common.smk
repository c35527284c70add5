# Configuration validation and the input functions every rule shares. Paths, the suite scan, the vLLM engine
# groups and the environment probe are the package's (workflow_scripts), never re-implemented here.
import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import min_version, validate

from workflow_scripts.core.configuration import ConfigError, check_yaml_syntax, location, schema_error, store_dir
from workflow_scripts.core.layout import ResultsLayout
from workflow_scripts.core.progress import report_progress
from workflow_scripts.evaluation.config import fill_protocol_defaults
from workflow_scripts.evaluation.environment import gpu_memory_gib, live_facts
from workflow_scripts.evaluation.gpu_lock import visible_gpus
from workflow_scripts.evaluation.resources import (baseline_reserved_cores, baseline_slots, compile_threads,
                                                   host_memory_bytes, host_resources, job_memory)
from workflow_scripts.evaluation.timeline import mark_run_start
from workflow_scripts.generation.kinds import calibration_models, kind_of, models_for_rule
from workflow_scripts.generation.preflight import RunContext, startup_problems
from workflow_scripts.generation.replay import cached_folder_problems, unfenced_answers
from workflow_scripts.generation.vllm import engine_groups
from workflow_scripts.suite.kernelbench import (
    KernelBenchError,
    check_revision,
    problem_files,
    suite_root_of,
    validate_checkout,
)
from workflow_scripts.suite.prompt import suite_prompt_lines

min_version("9.0")


def _check_config_file(path):
    try:
        check_yaml_syntax(path)
    except ConfigError as error:
        raise WorkflowError(str(error)) from None


# config.yaml is the default; a --configfile replaces it instead of being merged into it (merging would add the
# demo's models to the study's). config.yaml is checked before Snakemake reads it (Snakemake's message for a YAML
# syntax error names neither the file nor the line); a --configfile, which Snakemake's command line reads before
# this runs, is checked for a key written twice (YAML keeps the last silently: a model listed twice would vanish).
if not workflow.overwrite_configfiles:
    _check_config_file("config.yaml")

    configfile: "config.yaml"


for _file in workflow.overwrite_configfiles:
    _check_config_file(_file)
# A schema violation in one line (file and line, key path, what was expected), not Snakemake's dump of the schema.
_schema_problem = schema_error(config, Path(workflow.basedir, "schemas", "config.schema.yaml"), workflow.configfiles)
if _schema_problem:
    raise WorkflowError(_schema_problem)
validate(config, schema="../schemas/config.schema.yaml")  # fills in the schema's defaults
# The protocol's numbers come from the run configurations (workflow_scripts/evaluation/config.py, their one home):
# every evaluation and baselines key left out is filled in from there, for the rules, the report and summary.json.
fill_protocol_defaults(config, Path(workflow.basedir, "schemas", "config.schema.yaml"))

LAYOUT = ResultsLayout(config["results_dir"])
STORE = store_dir(config)  # `store`, else <results_dir>/.store
SUITE = config["suite"]["path"]
LEVELS = config["suite"]["levels"]
EVAL = config["evaluation"]
DEVICE = EVAL["device"]
MODELS = list(config["models"])


def run_cores():
    """The run's total cores (--cores), or None where it sets none (a cluster run's submitting process): Snakemake
    refuses to read workflow.cores there."""
    try:
        return workflow.cores
    except WorkflowError:
        return None


def baseline_workers():
    """A baseline job's compile workers (evaluation/resources.py compile_threads)."""
    return compile_threads(run_cores(), config["baselines"]["compile_threads"])


def baseline_threads():
    """The cores a baseline job reserves as its rule's threads: a share of its compile workers, which are busy only in
    bursts (evaluation/resources.py baseline_reserved_cores)."""
    return baseline_reserved_cores(baseline_workers())


def _bound_by_the_host():
    """A local run bounds what its jobs take at once by this host's GPUs and memory (evaluation/resources.py
    host_resources: `gpu`, `gpu_mem_gb`, `mem_mb`, `baselines`), each only where --resources (or a profile) sets none, so the
    README's `snakemake --cores all` keeps every GPU busy without flags. A run given --jobs (a cluster's: Snakemake's
    scheduler, too, takes `_nodes` for a submission) leaves it to the executor, each job getting its own allocation;
    a dry run prints what each job declares, unclipped by the bounds. (The executor itself is not known yet here.)"""
    submits = workflow.global_resources["_nodes"].value is not None
    if not workflow.is_main_process or submits or workflow.output_settings.dryrun:
        return
    gpus = visible_gpus(EVAL.get("gpus")) if DEVICE == "cuda" else []
    slots = baseline_slots(run_cores(), baseline_threads())
    for name, value in host_resources(DEVICE, gpus, gpu_memory_gib, host_memory_bytes(), slots).items():
        if workflow.global_resources.get(name).value is None:
            workflow.register_resource(name, value)


_bound_by_the_host()
# Snakemake runs ready jobs of higher priority first. Completions and answer tables come before any evaluation, so a
# problem's first evaluate job finds every model's answers written and judges them all against one reference side
# (its companions, stages/evaluate.py). In the default order, evaluate jobs of the first models started before the
# other models' answers existed: 62 of the demo's 78 evaluate jobs judged answers, for 13 problems (bench/archive/NOTES.md, fifteenth session).
ANSWERS_FIRST = 10
# Baselines next, before any evaluation (rules/evaluation.smk): each takes a baseline slot (baseline_slots) and compiles
# beside the evaluations, which take the other cores.
BASELINES_EARLY = 5


def evaluation_priority(wildcards):
    """Among ready evaluate jobs, the first configured model's first, then the second's, ...: all in (0, 1], below
    BASELINES_EARLY. A problem's first job judges every model's answer along, holding each answer's lock; a second
    job of the same problem started beside it only waits on its own answer's lock, holding an evaluation slot (in an
    H100 run three of its first four evaluate jobs were one problem's, bench/README.md s30). One model's jobs are of
    different problems, so the slots judge as many problems at once; the other models' jobs then find their results
    stored."""
    return 1.0 - MODELS.index(wildcards.model) / len(MODELS)


for _name in [config["summary"]["reference"], *(config["summary"]["compare"] or [])]:
    if _name not in config["models"]:
        raise WorkflowError(f"summary names model {_name!r}, which is not under models: (models: {MODELS})")
for _run, _names in (config["summary"]["samples"] or {}).items():
    for _name in [name for name in _names if name not in config["models"]]:
        _where = location(workflow.configfiles, ["summary", "samples", _run])
        raise WorkflowError(f"{_where}: summary.samples {_run!r} names model {_name!r}, which is not under models")
# Jobs run `python`: the interpreter that runs Snakemake (its folder goes first on the PATH the jobs inherit),
# or under --sdm conda the one of the job's environment, which conda's activation puts before it.
envvars:
    "PATH",


_search_path = os.environ["PATH"]
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), _search_path])


def _scan_suite():
    """(level, id) -> problem file; None while the suite is still to be fetched (by fetch_kernelbench)."""
    if not Path(SUITE).is_dir():
        if config["suite"]["fetch"]:
            return None
        raise WorkflowError(
            f"suite.path {SUITE!r} does not exist. Point suite.path at a KernelBench checkout "
            f"(levels {LEVELS}) or set suite.fetch: true with suite.revision to download it."
        )
    suite = config["suite"]
    counts = {int(k): v for k, v in suite["expected_problems"].items()} if suite["expected_problems"] else None
    # The checks the problems stage makes (its levels and counts, then its revision), made now (by the run itself, not
    # again in each cluster job's own parse): a copy whose revision cannot be confirmed stops here, naming the line,
    # not at the first job.
    checks = (("path", lambda: validate_checkout(SUITE, None, counts, LEVELS)),
              ("revision", lambda: check_revision(SUITE, suite["revision"] or None)))
    for key, check in checks if workflow.is_main_process else ():
        try:
            check()
        except KernelBenchError as error:
            raise WorkflowError(f"{location(workflow.configfiles, ['suite', key])}: {error}") from None
    try:
        return problem_files(SUITE, LEVELS, {int(k): v for k, v in (suite["only"] or {}).items()})
    except KernelBenchError as error:
        raise WorkflowError(f"suite.path {SUITE!r}: {error}") from None


PROBLEMS = _scan_suite()
SUITE_FILES = sorted(PROBLEMS.values()) if PROBLEMS else []
PROMPT_FILES = sorted(str(p) for p in Path(SUITE, "src", "kernelbench", "prompts").rglob("*") if p.is_file()) if PROBLEMS else []
VLLM_ENGINES = sorted(engine_groups(config["models"]).items())


def as_params(value):
    """A stage's --params: one JSON object, shell-quoted in the command by the :q format."""
    return json.dumps(value, sort_keys=True)


def model_regex(rule):
    """The models whose completions `rule` writes (generation/kinds.py, by their kind), as a wildcard constraint."""
    names = models_for_rule(config["models"], rule)
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


def problem_file(wildcards):
    return PROBLEMS[(int(wildcards.level), int(wildcards.problem_id))]


def evaluation_files(model):
    return [LAYOUT.evaluation(model, level, pid) for level, pid in PROBLEMS] if PROBLEMS else []


def baseline_files():
    return [LAYOUT.baseline(level, pid) for level, pid in PROBLEMS] if PROBLEMS else []


# The completions folders of the kinds that replay one (cached) are checked now, at parse time: an error inside an
# input function can be swallowed by Snakemake when the rows already exist, and a misnamed file, or a folder with
# none of the run's problems, would silently become missing_completion rows.
_SUITE_PROBLEMS = set(problem_files(SUITE, LEVELS)) if PROBLEMS else None
for _name in [name for name, model in config["models"].items() if kind_of(model).reads_folder]:
    _folder = config["models"][_name]["completions"]
    _problems = cached_folder_problems(_folder, PROBLEMS, _SUITE_PROBLEMS)
    _where = location(workflow.configfiles, ["models", _name, "completions"], _folder)
    if _problems:
        raise WorkflowError(f"{_where}: model {_name}: " + "; ".join(_problems))
    for _unfenced in unfenced_answers(_folder) if workflow.is_main_process else []:
        logger.warning(f"{_where}: model {_name}: {_unfenced}")


def cached_completion_files(wildcards):
    model = config["models"][wildcards.model]
    if not kind_of(model).reads_folder:
        return []
    return sorted(str(p) for p in Path(model["completions"]).iterdir() if p.is_file())


def completion_cache(names):
    return config["models"][names[0]].get("cache", f"{STORE}/completions")


# The generating kinds' start-up checks (generation/preflight.py): a missing base model or adapter folder, settings
# that one vLLM engine cannot share, an offline model's answers missing from its cache. They stop the run here,
# before any job, each naming its configuration line; models whose completions are written already are not checked.
# The run itself checks, not each cluster job's own parse; linting plans nothing and checks the rules alone: Snakemake
# lints without its envvars check (check_envvars is False only there), and without these.
_CHECKING = workflow.is_main_process and workflow.check_envvars
_PENDING = {name for name in MODELS if not Path(LAYOUT.completions(name)).exists()} if _CHECKING else set()
_STARTUP = startup_problems(
    config["models"],
    _PENDING,
    RunContext(
        (lambda: suite_prompt_lines(SUITE, PROBLEMS, config["prompt"])) if PROBLEMS else None,
        {name: Path(completion_cache([name])) for name in MODELS},
    ),
)
if _STARTUP:
    raise WorkflowError("\n".join(f"{location(workflow.configfiles, p.keys)}: {p.message}" for p in _STARTUP))


def self_parity_files(names):
    """The self-parity reports of the models among ``names`` that ask for one (a vLLM entry's self_parity)."""
    return [LAYOUT.self_parity(name) for name in names if config["models"][name].get("self_parity")]


def gpu_resources():
    """GPU jobs take one unit of `gpu` (a local run gives each GPU JOBS_PER_GPU units, _bound_by_the_host); their
    memory is memory_resources'."""
    return {"gpu": 1 if DEVICE == "cuda" else 0}


def memory_resources(job):
    """mem_mb and gpu_mem_gb of an evaluate or baseline job: the package's estimate from the problem's sizes in the
    problems table (workflow_scripts/evaluation/resources.py; an evaluate job judges every model's answer along).
    Callables: Snakemake evaluates them again, with the job's input, when it schedules the job, so they see the
    table once the problems stage has written it; before that (a dry run on a fresh folder) and for a problem
    without sizes they give the fallback (evaluation.memory_gb, 8000 MB)."""

    def memory(wildcards, input):
        return job_memory(job, input.problems, int(wildcards.level), int(wildcards.problem_id), EVAL, len(MODELS))

    return {
        "mem_mb": lambda wildcards, input: memory(wildcards, input).mem_mb,
        "gpu_mem_gb": lambda wildcards, input: memory(wildcards, input).gpu_mem_gb,
    }


def summary_figures():
    return list(LAYOUT.figures(level for level, _ in PROBLEMS).values()) if PROBLEMS else []


def final_targets():
    if PROBLEMS is None:
        return [f"{SUITE}/.kernelbench_revision"]
    return [LAYOUT.rows(), LAYOUT.summary_json(), LAYOUT.summary_markdown(), LAYOUT.table("levels"),
            LAYOUT.table("gpu_usage")]


def results_root(wildcards, output):
    """The results folder, from an output's path (the stages find every other file there through the layout)."""
    return LAYOUT.root_of(output[0])


def suite_root(wildcards, input):
    """The suite folder, from one of its files among the inputs."""
    return str(suite_root_of(input[0]))


def output_folder(wildcards, output):
    return str(Path(output[0]).parent)
