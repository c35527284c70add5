"""Each configuration keeps its results apart: its own results folder (the demo never shares one with the study or
the H200 run), its store inside it; the KernelBench-exact overlay writes its own folder and reuses the study's
store."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import yaml

from workflow_scripts.tools.explain import merge_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATIONS = {"demo": ["config.yaml"], "study": ["config/study.yaml"], "h200": ["config/h200.yaml"],
                  "study, KernelBench exact": ["config/study.yaml", "config/kernelbench_exact.yaml"]}


def configuration(files: list[str]) -> dict:
    merged: dict = {}
    for name in files:  # as Snakemake merges several --configfile values
        merged = merge_config(merged, yaml.safe_load((ROOT / name).read_text()))
    return merged


def test_every_configuration_has_its_own_results_folder_and_store() -> None:
    folders = {name: PurePosixPath(configuration(files)["results_dir"]) for name, files in CONFIGURATIONS.items()}
    assert len(set(folders.values())) == len(folders), folders
    for name, folder in folders.items():
        assert folder.parent == PurePosixPath("results"), (name, folder)  # results/<configuration>
        for other, elsewhere in folders.items():
            assert other == name or folder not in elsewhere.parents, (name, other)  # none nested in another
    for name in ("demo", "study", "h200"):  # its store inside it
        config = configuration(CONFIGURATIONS[name])
        assert PurePosixPath(config["results_dir"]) in PurePosixPath(config["store"]).parents, name
    exact = configuration(CONFIGURATIONS["study, KernelBench exact"])
    assert exact["store"] == configuration(CONFIGURATIONS["study"])["store"]  # objects keyed by their settings
