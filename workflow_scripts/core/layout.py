"""The results folder's layout: every path a rule writes and a stage reads, in one place. rules/common.smk builds
its rule outputs from these (with wildcards such as "{model}" passed in as the names), so the workflow and the
stages can never disagree on where a file lives.

Paths are strings: rules use them as patterns, stages wrap them in Path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePath

FIGURE_EXTENSIONS = ("png", "svg")
# Figure stems: scoring/figures.py saves under exactly these names, the summary rule declares exactly these outputs.
FAST_P_FIGURE = "fast_p_level{level}"
BOOTSTRAP_FIGURE = "bootstrap_forest"
STRATEGY_FIGURE = "level2_strategy"
CORRECT_FIGURE = "correct_compiled"
CROSS_LEVEL_FIGURES = (BOOTSTRAP_FIGURE, STRATEGY_FIGURE, CORRECT_FIGURE)


def problem_key(level: int | str, problem_id: int | str) -> str:
    return f"level{level}_{problem_id}"


def figure_names(levels: Iterable[int]) -> list[str]:
    """The figure stems of a run over ``levels``: one fast_p curve per level, then the cross-level figures."""
    return [FAST_P_FIGURE.format(level=int(level)) for level in sorted(set(levels))] + list(CROSS_LEVEL_FIGURES)


@dataclass(frozen=True)
class ResultsLayout:
    root: str = "results"

    # stages 1-2
    def problems(self) -> str:
        return f"{self.root}/problems.parquet"

    def prompts(self) -> str:
        return f"{self.root}/prompts.jsonl"

    # stages 3-5, per model
    def completions_dir(self) -> str:
        return f"{self.root}/completions"

    def completions(self, model: str) -> str:
        return f"{self.completions_dir()}/{model}.jsonl"

    def self_parity(self, model: str) -> str:
        """A vLLM model's self-parity report (generation/self_parity.py), beside its completions."""
        return f"{self.completions_dir()}/{model}.self_parity.json"

    def answers(self, model: str) -> str:
        return f"{self.root}/answers/{model}.parquet"

    def model_names(self) -> str:
        """The configured models' names (rule model_names): every evaluate job reads it to judge the others along."""
        return f"{self.root}/models.json"

    def static(self, model: str) -> str:
        return f"{self.root}/static/{model}.parquet"

    # stages 6-7
    def environment(self, device: str) -> str:
        return f"{self.root}/environment/{device}.json"

    def device_rates(self, device: str) -> str:
        return f"{self.root}/environment/{device}_rates.json"

    def evaluation(self, model: str, level: int | str, problem_id: int | str) -> str:
        return f"{self.root}/evaluations/{model}/{problem_key(level, problem_id)}.json"

    def baseline(self, level: int | str, problem_id: int | str) -> str:
        return f"{self.root}/baselines/{problem_key(level, problem_id)}.json"

    # stages 8-9
    def rows(self) -> str:
        return f"{self.root}/evaluations.parquet"

    def flags(self) -> str:
        return f"{self.root}/tables/flags.parquet"

    def model_rows(self, model: str) -> str:
        return f"{self.root}/models/{model}.parquet"

    def model_flags(self, model: str) -> str:
        return f"{self.root}/models/{model}.flags.parquet"

    def summary_json(self) -> str:
        return f"{self.root}/summary.json"

    def summary_markdown(self) -> str:
        return f"{self.root}/summary.md"

    def table(self, name: str) -> str:
        return f"{self.root}/tables/{name}.parquet"

    def figures_dir(self) -> str:
        return f"{self.root}/figures"

    def figures(self, levels: Iterable[int]) -> dict[str, str]:
        """File name -> path of every figure a run over ``levels`` draws."""
        return {f"{name}.{ext}": f"{self.figures_dir()}/{name}.{ext}"
                for name in figure_names(levels) for ext in FIGURE_EXTENSIONS}

    def root_of(self, path: str) -> str:
        """The results folder, for a path inside it (an error names a path outside it)."""
        if PurePath(self.root) not in PurePath(path).parents:
            raise ValueError(f"{path} is not inside the results folder {self.root}")
        return self.root

    def log(self, name: str) -> str:
        return f"{self.root}/logs/{name}.log"

    def locks(self) -> str:
        return f"{self.root}/.locks"
