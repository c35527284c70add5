"""Reading what the collect stage joins: the problem index, each model's tables, the evaluation objects (with the
store key each was computed or reused under) and the shared baselines, all found through the results layout."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.core.layout import ResultsLayout, problem_key
from workflow_scripts.core.store import Store
from workflow_scripts.core.records import DeviceRates


@dataclass(frozen=True)
class RowInputs:
    """The files of one collect run, keyed by role (the role names are part of the store's input hashes)."""

    problems: pd.DataFrame
    models: list[str]
    files: dict[str, Path]

    @classmethod
    def find(cls, problems_file: Path, models: list[str], layout: ResultsLayout, device_rates: Path) -> RowInputs:
        problems = pd.read_parquet(problems_file)
        files: dict[str, Path] = {"problems": Path(problems_file), "device_rates": Path(device_rates)}
        keys = [(int(p.level), int(p.problem_id)) for p in problems.itertuples()]
        for model in models:
            files[f"answers:{model}"] = Path(layout.answers(model))
            files[f"static:{model}"] = Path(layout.static(model))
            for level, pid in keys:
                files[f"evaluation:{model}:{problem_key(level, pid)}"] = Path(layout.evaluation(model, level, pid))
        for level, pid in keys:
            files[f"baseline:{problem_key(level, pid)}"] = Path(layout.baseline(level, pid))
        return cls(problems, list(models), files)

    def hashes(self, store: Store) -> dict[str, str]:
        """Each file's sha256, checked against the store's manifest: an edited result file stops the run here."""
        return {role: store.check_result(path) for role, path in self.files.items()}

    def rates(self) -> DeviceRates:
        """The device's measured rates (each problem's floor)."""
        return DeviceRates.from_dict(json.loads(self.files["device_rates"].read_text()))

    def load(self, store: Store) -> tuple[dict, dict, dict, dict]:
        """answers, static, evaluations and baselines, as collect_rows takes them."""
        answers = {m: pd.read_parquet(self.files[f"answers:{m}"]) for m in self.models}
        static = {m: pd.read_parquet(self.files[f"static:{m}"]) for m in self.models}
        evaluations: dict[tuple[str, int, int], dict[str, Any]] = {}
        baselines: dict[tuple[int, int], dict[str, Any]] = {}
        for p in self.problems.itertuples():
            key = problem_key(p.level, p.problem_id)
            baselines[(p.level, p.problem_id)] = json.loads(self.files[f"baseline:{key}"].read_text())
            for m in self.models:
                path = self.files[f"evaluation:{m}:{key}"]
                evaluation = json.loads(path.read_text())
                # The store key the evaluation was reused or computed under: reviewers find the object by it.
                entry = store.manifest_entry(path)
                evaluation["evaluation_key"] = entry["key"] if entry else None
                evaluations[(m, p.level, p.problem_id)] = evaluation
        return answers, static, evaluations, baselines
