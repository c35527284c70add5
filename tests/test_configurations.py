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
                  "study, KernelBench exact": ["config/study.yaml", "config/kernelbench_exact.yaml"]}


def configuration(files: list[str]) -> dict:
    return workflow_configuration.load([ROOT / name for name in files])  # as Snakemake merges --configfile values


def test_every_configuration_has_its_own_results_folder_and_store() -> None:
    folders = {name: PurePosixPath(configuration(files)["results_dir"]) for name, files in CONFIGURATIONS.items()}
    assert len(set(folders.values())) == len(folders), folders
    for name, folder in folders.items():
        assert folder.parent == PurePosixPath("results"), (name, folder)  # results/<configuration>
        for other, elsewhere in folders.items():
            assert other == name or folder not in elsewhere.parents, (name, other)  # none nested in another
    for name in ("demo", "study", "h200", "dag bench", "dag bench, evaluations yielding"):  # its store inside it
        config = configuration(CONFIGURATIONS[name])
        assert PurePosixPath(config["results_dir"]) in PurePosixPath(workflow_configuration.store_dir(config)).parents, name
    exact = configuration(CONFIGURATIONS["study, KernelBench exact"])
    study = configuration(CONFIGURATIONS["study"])
    assert workflow_configuration.store_dir(exact) == workflow_configuration.store_dir(study)  # keyed by settings
