"""Each configuration keeps its results apart: its own results folder (the demo never shares one with the study or
the H200 run), its store inside it; the KernelBench-exact overlay writes its own folder and reuses the study's
store."""

from __future__ import annotations

from pathlib import Path, PurePosixPath


from workflow_scripts.core import configuration as workflow_configuration

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATIONS = {"demo": ["config.yaml"], "study": ["config/study.yaml"], "h200": ["config/h200.yaml"],
                  "dag bench": ["config/dag_bench.yaml"],
                  "dag bench, evaluations yielding": ["config/dag_bench.yaml", "config/yield_gpu.yaml"],
                  "dag bench, whole-job leases": ["config/dag_bench.yaml", "config/whole_job_lease.yaml"],
                  "dag bench, study's shape": ["config/dag_bench.yaml", "config/study_shape.yaml"],
                  "dag bench, autotuning in the job's turn": ["config/dag_bench.yaml", "config/autotune_in_turn.yaml"],
                  "dag bench, one answer process ahead": ["config/dag_bench.yaml", "config/prestart_one.yaml"],
                  "dag bench, compiling beside timing": ["config/dag_bench.yaml", "config/compile_beside_timing.yaml"],
                  "study, KernelBench exact": ["config/study.yaml", "config/kernelbench_exact.yaml"]}
# Overlays that run part of a configuration's work, into its folder: the overlay, and the configuration it narrows.
SUBSETS = {"config/yield_smoke.yaml": "dag bench, evaluations yielding"}


def configuration(files: list[str]) -> dict:
    return workflow_configuration.load([ROOT / name for name in files])  # as Snakemake merges --configfile values


def test_every_configuration_has_its_own_results_folder_and_store() -> None:
    folders = {name: PurePosixPath(configuration(files)["results_dir"]) for name, files in CONFIGURATIONS.items()}
    assert len(set(folders.values())) == len(folders), folders
    for name, folder in folders.items():
        assert folder.parent == PurePosixPath("results"), (name, folder)  # results/<configuration>
        for other, elsewhere in folders.items():
            assert other == name or folder not in elsewhere.parents, (name, other)  # none nested in another
    for name in ("demo", "study", "h200", "dag bench", "dag bench, evaluations yielding", "dag bench, whole-job leases",
                 "dag bench, study's shape", "dag bench, autotuning in the job's turn",
                 "dag bench, one answer process ahead"):  # its store inside it
        config = configuration(CONFIGURATIONS[name])
        assert PurePosixPath(config["results_dir"]) in PurePosixPath(workflow_configuration.store_dir(config)).parents, name
    exact = configuration(CONFIGURATIONS["study, KernelBench exact"])
    study = configuration(CONFIGURATIONS["study"])
    assert workflow_configuration.store_dir(exact) == workflow_configuration.store_dir(study)  # keyed by settings


def test_a_subset_overlay_writes_into_the_folder_of_the_configuration_it_narrows() -> None:
    for overlay, name in SUBSETS.items():
        narrowed = configuration([*CONFIGURATIONS[name], overlay])
        assert narrowed["results_dir"] == configuration(CONFIGURATIONS[name])["results_dir"], overlay


def test_every_configuration_file_is_checked_here() -> None:
    # A new configuration or overlay is checked for a results folder of its own only if it is listed above.
    listed = {name for files in CONFIGURATIONS.values() for name in files} | set(SUBSETS)
    assert {f"config/{path.name}" for path in (ROOT / "config").glob("*.yaml")} | {"config.yaml"} == listed
