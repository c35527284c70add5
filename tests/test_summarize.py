"""The summary stage (workflow_scripts.scoring.summary): definitions, bootstrap, published numbers, CLI determinism."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from workflow_scripts.core.store import Store
from workflow_scripts.scoring import metrics, significance
from workflow_scripts.scoring import summary as sm
from workflow_scripts.scoring.context import parse_context
from workflow_scripts.scoring.known_issues import KNOWN_ISSUES

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO.parent / "shared" / "published" / "results.json"


def row(model: str, level: int, pid: int, *, compiled: bool = True, correct: bool = True, se: float | None = None,
        sc: float | None = None, keeps: bool | None = False, tokens: int | None = None) -> dict[str, Any]:
    return {"model": model, "level": level, "problem_id": pid, "problem": f"P{level}_{pid}", "compiled": compiled,
            "correct": correct, "speedup_eager": se, "speedup_compile": sc, "keeps_torch_op": keeps,
            "completion_tokens": tokens}


def hand_rows() -> pd.DataFrame:
    """Model 'm' exercises every definition; 'ref' is a plain reference. 7 level-1 and 5 level-2 problems."""
    m = [
        # level 1: the strict '>' at each p, a failed eager baseline, an incorrect answer with a (bogus) speedup
        row("m", 1, 1, se=1.0, sc=1.0, tokens=100),  # exactly 1.0: not fast
        row("m", 1, 2, se=1.5, sc=1.0000001, tokens=200),  # fast_1 eager (not 1.5); fast_1 compile
        row("m", 1, 3, se=2.0, sc=1.5, keeps=True),  # eager fast_1, fast_1.5 (not 2); compile fast_1 only
        row("m", 1, 4, se=2.0000001, sc=2.0),  # eager fast at all p; compile fast_1, fast_1.5
        row("m", 1, 5, se=None, sc=3.0),  # eager baseline failed: stays in n, never eager-fast
        row("m", 1, 6, correct=False, se=5.0, sc=5.0),  # not correct: never fast
        row("m", 1, 7, compiled=False, correct=False, keeps=None),  # no answer at all
        # level 2: flags (> 10 on either baseline, strictly) and the strategy split
        row("m", 2, 1, se=10.0, sc=0.5),  # exactly 10: not flagged
        row("m", 2, 2, se=10.5, sc=3.0),  # flagged via eager
        row("m", 2, 3, se=0.9, sc=11.0),  # flagged via compile
        row("m", 2, 4, se=1.2, sc=1.1, keeps=True),  # fast, unflagged, hybrid
        row("m", 2, 5, correct=False, se=50.0, keeps=True),  # keeps an op, not correct
    ]
    ref = [row("ref", r["level"], r["problem_id"], compiled=True, correct=r["problem_id"] % 2 == 1,
               se=1.2 if r["problem_id"] % 2 == 1 else None, sc=0.8) for r in m]
    # Shuffled on purpose: the summary sorts by (level, problem_id) itself.
    return pd.DataFrame(m[::-1] + ref)


# ---------------------------------------------------------------------------------------------------- definitions


def test_level_counts_every_field() -> None:
    summary = sm.summarize(hand_rows(), reference="ref", resamples=200)
    levels = summary["models"]["m"]["levels"]
    assert list(levels) == ["overall", "1", "2"]
    assert levels["1"] == {
        "n": 7, "compiled": 6, "correct": 5,
        "eager_fast_1": 3, "eager_fast_1.5": 2, "eager_fast_2": 1,
        "compile_fast_1": 4, "compile_fast_1.5": 2, "compile_fast_2": 1,
        "flags": 0, "eager_fast_1_unflagged": 3, "compile_fast_1_unflagged": 4,
    }
    assert levels["2"] == {
        "n": 5, "compiled": 5, "correct": 4,
        "eager_fast_1": 3, "eager_fast_1.5": 2, "eager_fast_2": 2,
        "compile_fast_1": 3, "compile_fast_1.5": 2, "compile_fast_2": 2,
        "flags": 2, "eager_fast_1_unflagged": 2, "compile_fast_1_unflagged": 1,
    }
    assert levels["overall"] == {k: levels["1"][k] + levels["2"][k] for k in sm.level_fields()}
    assert list(levels["1"]) == list(sm.level_fields())


def test_strict_threshold_at_each_p() -> None:
    rows = pd.DataFrame([row("m", 1, i, se=v, sc=v) for i, v in enumerate([1.0, 1.5, 2.0], start=1)])
    counts = sm.summarize(rows, resamples=10)["models"]["m"]["levels"]["1"]
    # 1.0 is not > 1; 1.5 is > 1 but not > 1.5; 2.0 is > 1.5 but not > 2.
    assert (counts["eager_fast_1"], counts["eager_fast_1.5"], counts["eager_fast_2"]) == (2, 1, 0)
    assert (counts["compile_fast_1"], counts["compile_fast_1.5"], counts["compile_fast_2"]) == (2, 1, 0)


def test_a_threshold_added_in_metrics_reaches_the_json_the_markdown_and_the_levels_table(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """scoring/metrics.py THRESHOLDS is the one home of the fast_p thresholds: one added there (3) is a count of the
    JSON at its place, a column of the markdown table and of levels.parquet (described by core/columns.py's family),
    with no other edit."""
    monkeypatch.setattr(metrics, "THRESHOLDS", (*metrics.THRESHOLDS, ("3", 3.0)))
    summary = sm.summarize(hand_rows(), reference="ref", resamples=10)
    level2 = summary["models"]["m"]["levels"]["2"]
    assert list(level2) == ["n", "compiled", "correct", "eager_fast_1", "eager_fast_1.5", "eager_fast_2",
                            "eager_fast_3", "compile_fast_1", "compile_fast_1.5", "compile_fast_2", "compile_fast_3",
                            "flags", "eager_fast_1_unflagged", "compile_fast_1_unflagged"]
    assert (level2["eager_fast_3"], level2["compile_fast_3"]) == (2, 1)  # 10.0 and 10.5 > 3 eager; 11.0 compile
    header = next(line for line in sm.markdown_table(summary).splitlines() if line.startswith("| model |"))
    assert "| eager fast_2 | eager fast_3 | compile fast_1 |" in header and "| compile fast_3 | flags |" in header
    sm.write_outputs(summary, tmp_path / "summary.json", hand_rows())
    levels = pd.read_parquet(tmp_path / "tables" / "levels.parquet")
    assert list(levels.columns[3:3 + len(level2)]) == [sm.table_name(count) for count in level2]
    assert levels.set_index(["model", "level"]).loc[("m", "2"), "eager_fast_3"] == 2
    assert "fast_3" not in json.dumps(sm.summarize(hand_rows(), reference="ref", resamples=10)["paired_bootstrap_note"])


def test_failed_baseline_stays_in_denominator() -> None:
    rows = pd.DataFrame([row("m", 1, 1, se=None, sc=None), row("m", 1, 2, se=3.0, sc=float("nan"))])
    counts = sm.summarize(rows, resamples=10)["models"]["m"]["levels"]["1"]
    assert counts["n"] == 2 and counts["correct"] == 2
    assert counts["eager_fast_1"] == 1 and counts["compile_fast_1"] == 0


def test_tokens_mean_and_null() -> None:
    summary = sm.summarize(hand_rows(), reference="ref", resamples=10)
    assert summary["models"]["m"]["mean_completion_tokens"] == 150.0
    assert summary["models"]["ref"]["mean_completion_tokens"] is None


def test_levels_table_gives_each_level_its_own_mean_tokens() -> None:
    rows = pd.DataFrame([row("m", 1, 1, tokens=100), row("m", 1, 2, tokens=200), row("m", 2, 1, tokens=400),
                         row("m", 2, 2), row("m", 3, 1)])
    summary = sm.summarize(rows, resamples=10)
    table = sm.levels_table(summary, rows).set_index("level")["mean_completion_tokens"]
    assert table["overall"] == summary["models"]["m"]["mean_completion_tokens"] == 700 / 3
    assert (table["1"], table["2"]) == (150.0, 400.0)  # the rows with a token count of that level only
    assert pd.isna(table["3"])  # no row of level 3 has a token count


def test_level2_strategy() -> None:
    strategy = sm.summarize(hand_rows(), reference="ref", resamples=10)["level2_strategy"]
    assert strategy["m"] == {
        "1": {"answers_keeping_pytorch_op": 1, "fast_unflagged_hybrid": 1, "fast_unflagged_pure_triton": 2},
        "2": {"answers_keeping_pytorch_op": 2, "fast_unflagged_hybrid": 1, "fast_unflagged_pure_triton": 1},
    }
    assert strategy["ref"]["1"]["answers_keeping_pytorch_op"] == 0


def test_levels_from_rows() -> None:
    rows = pd.DataFrame([row("m", 3, 1, se=2.0, sc=2.0)])
    summary = sm.summarize(rows, resamples=10)
    assert list(summary["models"]["m"]["levels"]) == ["overall", "3"]
    assert list(summary["level2_strategy"]["m"]) == ["3"]


def test_bootstrap_fields_by_hand() -> None:
    summary = sm.summarize(hand_rows(), reference="ref", resamples=2000)
    boot = summary["paired_bootstrap_vs_ref"]["m"]
    # ref is correct on odd problem ids: level 1 {1,3,5,7}, level 2 {1,3,5}; m correct on L1 1-5, L2 1-4.
    # only m: L1 2,4 and L2 2,4 -> 4; only ref: L1 7, L2 5 -> 2.
    assert boot["correct"]["gained"] == 4 and boot["correct"]["lost"] == 2
    assert boot["correct"]["delta_pp"] == 100 * (2 / 12)
    # ref is eager-fast (1.2) wherever it is correct: L1 {1,3,5,7}, L2 {1,3,5}; m: L1 {2,3,4}, L2 {1,2,4}.
    # only m: L1 2,4, L2 2,4 -> 4; only ref: L1 1,5,7, L2 3,5 -> 5.
    assert (boot["fast_eager"]["gained"], boot["fast_eager"]["lost"]) == (4, 5)
    # ref is never compile-fast (0.8).
    assert (boot["fast_compile"]["gained"], boot["fast_compile"]["lost"]) == (7, 0)
    assert list(boot) == list(sm.BOOTSTRAP_METRICS)
    assert list(boot["correct"]) == ["delta_pp", "ci95_pp", "gained", "lost"]


def naive_bootstrap(model: np.ndarray, ref: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """The definition, written the slow obvious way."""
    d = model.astype(int) - ref.astype(int)
    idx = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)))
    lo, hi = np.percentile(d[idx].sum(axis=1) / len(d), [2.5, 97.5])
    return 100.0 * lo, 100.0 * hi


def test_bootstrap_matches_naive_definition() -> None:
    gen = np.random.default_rng(7)
    model = gen.random((5, 37)) < 0.5
    ref = gen.random((5, 37)) < 0.4
    results = sm.paired_bootstrap(model, ref, resamples=3001, seed=42, chunk=500)
    for k, result in enumerate(results):
        assert result.ci95_pp == naive_bootstrap(model[k], ref[k], 3001, 42)
        assert result.delta_pp == 100.0 * ((model[k].astype(int) - ref[k].astype(int)).sum() / 37)
        assert result.gained == int((model[k] & ~ref[k]).sum()) and result.lost == int((~model[k] & ref[k]).sum())


def test_chunked_draws_equal_one_draw() -> None:
    # The RNG definition says "the matrix rng.integers(0, n, (B, n))": chunking must not change it.
    n, b = 13, 1000
    full = np.random.default_rng(42).integers(0, n, size=(b, n))
    counts = np.concatenate(list(sm.resample_counts(n, b, 42, chunk=77)))
    expected = np.stack([np.bincount(r, minlength=n) for r in full]).astype(np.float32)
    assert np.array_equal(counts, expected)


def test_identical_models_give_zero() -> None:
    a = np.array([1, 0, 1, 1, 0], dtype=bool)
    (r,) = sm.paired_bootstrap(a, a, resamples=100, seed=1)
    assert r.delta_pp == 0.0 and r.ci95_pp == (0.0, 0.0) and (r.gained, r.lost) == (0, 0)


# ---------------------------------------------------------------------------------------------------- options


def test_reference_and_compare() -> None:
    rows = hand_rows()
    default = sm.summarize(rows, resamples=10)  # reference = first model ('m', first in the rows)
    assert list(default["paired_bootstrap_vs_m"]) == ["ref"]
    rows3 = pd.concat([rows, rows[rows.model == "m"].assign(model="z")])
    only = sm.summarize(rows3, reference="ref", compare=["z"], resamples=10)
    assert list(only["paired_bootstrap_vs_ref"]) == ["z"]
    both = sm.summarize(rows3, reference="ref", compare=["z", "m"], resamples=10)
    assert list(both["paired_bootstrap_vs_ref"]) == ["m", "z"]  # model order, not CLI order
    with pytest.raises(ValueError, match="not in the rows"):
        sm.summarize(rows, reference="nope", resamples=10)
    with pytest.raises(ValueError, match="not in the rows"):
        sm.summarize(rows, reference="ref", compare=["nope"], resamples=10)
    with pytest.raises(ValueError, match="itself"):
        sm.summarize(rows, reference="ref", compare=["ref"], resamples=10)


def test_context_order_labels_runtime() -> None:
    context = parse_context({
        "title": "T",
        "benchmark": {"name": "demo", "problems": 12},
        "runtime": {"gpu": "none"},
        "models": {"ref": {"label": "Reference"}, "ghost": {"label": "absent"},
                   "m": {"label": "Model M", "generation": {"provider": "x", "output_token_cap": 8192}}},
        "notes": {"level2_strategy": "Extra."},
    })
    summary = sm.summarize(hand_rows(), reference="ref", resamples=10, context=context)
    assert list(summary) == ["title", "benchmark", "models", "paired_bootstrap_vs_ref", "paired_bootstrap_note",
                             "level2_strategy", "level2_strategy_note", "audit", "speed_verdicts"]
    assert summary["benchmark"] == {"name": "demo", "problems": 12, "runtime": {"gpu": "none"}}
    assert list(summary["models"]) == ["ref", "m"]
    assert list(summary["models"]["m"]) == ["label", "levels", "mean_completion_tokens", "generation"]
    assert summary["models"]["m"]["generation"] == {"provider": "x", "output_token_cap": 8192}
    assert list(summary["models"]["ref"]) == ["label", "levels", "mean_completion_tokens"]
    assert summary["level2_strategy_note"].endswith("Extra.")
    assert "10 paired resamples" in summary["paired_bootstrap_note"] and "seed 42" in summary["paired_bootstrap_note"]
    with pytest.raises(ValueError, match="unknown context keys"):
        parse_context({"modles": {}})
    with pytest.raises(ValueError, match="unknown keys"):
        parse_context({"models": {"m": {"lable": "x"}}})


def test_no_context_no_label() -> None:
    summary = sm.summarize(hand_rows(), reference="ref", resamples=10)
    assert summary["benchmark"] == {}
    assert "label" not in summary["models"]["m"] and "generation" not in summary["models"]["m"]


def test_self_parity_and_samples_sit_beside_the_published_fields() -> None:
    # Issue 36: a vLLM model's self-parity report (generation/self_parity.py) and a run's samples (scoring/samples.py)
    # are added only when given; every published field stays as it is.
    plain = sm.summarize(hand_rows(), reference="ref", resamples=10)
    report = {"model": "m", "prompts": 4, "identical": 3, "agreement": 0.75, "token_agreement": 0.9,
              "problems": [[1, 1]], "settings": {"batch_invariant": False}}
    both = sm.summarize(hand_rows(), reference="ref", resamples=10, self_parity={"m": report},
                        samples={"run": ["m", "ref"]})
    assert both["models"]["m"]["self_parity"] == {"prompts": 4, "identical": 3, "agreement": 0.75,
                                                  "token_agreement": 0.9, "skipped": None}
    assert "self_parity" not in both["models"]["ref"]
    assert {k: v for k, v in both.items() if k != "samples"} == {
        **plain, "models": {**plain["models"], "m": {**plain["models"]["m"], "self_parity": both["models"]["m"]
                                                     ["self_parity"]}}}
    assert both["samples"]["run"]["n"] == 2 and both["samples"]["run"]["problems"] == 12
    markdown = sm.markdown_table(both)
    assert "Self-parity of m: 3 of 4 sampled prompts generated identically twice (token agreement 0.900)." in markdown
    assert "Run run, 2 samples per problem (m, ref):" in markdown
    assert "Self-parity" not in sm.markdown_table(plain) and "Run " not in sm.markdown_table(plain)


def test_bad_rows_rejected() -> None:
    rows = hand_rows()
    with pytest.raises(ValueError, match="lacks rows"):
        sm.summarize(rows.iloc[1:], resamples=10)
    with pytest.raises(ValueError, match="duplicate"):
        sm.summarize(pd.concat([rows, rows.iloc[:1]]), resamples=10)
    with pytest.raises(ValueError, match="lack columns"):
        sm.summarize(rows.drop(columns="keeps_torch_op"), resamples=10)
    bad = rows.copy()
    bad.loc[(bad.model == "m") & (bad.level == 1) & (bad.problem_id == 1), "compiled"] = False  # a correct row
    with pytest.raises(ValueError, match="correct but not compiled"):
        sm.summarize(bad, resamples=10)


def test_nullable_dtypes() -> None:
    # What collect writes: boolean / Int64 / float with NaN.
    rows = hand_rows().astype({"keeps_torch_op": "boolean", "completion_tokens": "Int64", "speedup_eager": "Float64"})
    plain = sm.summarize(hand_rows(), reference="ref", resamples=50)
    assert sm.summarize(rows, reference="ref", resamples=50) == plain


def test_tables_and_markdown(tmp_path: Path) -> None:
    summary = sm.summarize(hand_rows(), reference="ref", resamples=50)
    written = sm.write_outputs(summary, tmp_path / "summary.json", hand_rows(), markdown=tmp_path / "t.md")
    levels = pd.read_parquet(tmp_path / "tables" / "levels.parquet")
    assert len(levels) == 2 * 3  # models x (overall, 1, 2)
    m2 = levels[(levels.model == "m") & (levels.level == "2")].iloc[0]
    assert "flags" not in levels.columns  # it would shadow DataFrame.flags: the JSON's flags count is "flagged"
    assert m2["flagged"] == 2 and m2["eager_fast_1.5"] == 2 and m2["fast_unflagged_hybrid"] == 1
    assert levels[(levels.model == "m") & (levels.level == "overall")].iloc[0]["answers_keeping_pytorch_op"] == 3
    boot = pd.read_parquet(tmp_path / "tables" / "bootstrap.parquet")
    assert list(boot.metric) == list(sm.BOOTSTRAP_METRICS)
    text = (tmp_path / "t.md").read_text()
    lines = text.splitlines()
    # what was measured comes first, then the headline table
    assert lines[0] == "# KernelBench" and lines[2].startswith("Measured on an unrecorded device; timing: not recorded")
    assert "12 problems per model" in lines[2] and lines[3].startswith("Degenerate problems") and "0 of 12" in lines[3]
    assert lines[5].startswith("| model | label | n | compiled | correct |")
    assert "| m |" in text and "reference" in text
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert tmp_path / "t.md" in written


def test_the_audit_counts_without_degenerate_problems_and_leaves_the_calibration_out_of_the_bootstrap() -> None:
    """Level-2 problems 1 and 2 audited degenerate (in one row each: the other model's rows may lack the audit):
    the published counts do not move, the audit block counts without them; geometric means over correct answers;
    the calibration model is not compared, and the markdown says what it is."""
    rows = hand_rows()
    rows["degenerate"] = pd.array([None] * len(rows), dtype="boolean")
    marked = (rows.model == "m") & (rows.level == 2) & rows.problem_id.isin([1, 2])
    rows.loc[marked, "degenerate"] = True
    calibration = rows[rows.model == "ref"].assign(model="calibration", correct=True, compiled=True,
                                                   speedup_eager=1.0, speedup_compile=1.0)
    rows = pd.concat([rows, calibration], ignore_index=True)
    plain = sm.summarize(hand_rows(), reference="ref", resamples=50)
    summary = sm.summarize(rows, reference="ref", resamples=50, calibration=["calibration"])
    assert summary["models"]["m"] == plain["models"]["m"]  # the published counts, from the same rows
    audit = summary["audit"]
    assert audit["degenerate_problems"] == ["L2/1 P2_1", "L2/2 P2_2"] and audit["calibration_models"] == ["calibration"]
    without = audit["models"]["m"]["without_degenerate"]
    assert without["2"]["n"] == 3 and without["2"]["correct"] == 2 and without["1"] == plain["models"]["m"]["levels"]["1"]
    assert without["overall"]["n"] == 10 and without["2"]["flags"] == 1  # L2/2 (10.5 eager) left out, L2/3 kept
    means = audit["models"]["m"]["geomean_speedup"]
    assert means["2"]["eager_n"] == 4 and means["2"]["eager"] == pytest.approx((10.0 * 10.5 * 0.9 * 1.2) ** 0.25)
    assert means["1"]["eager_n"] == 4  # the failed eager baseline (NaN) and the incorrect answer left out
    assert audit["models"]["calibration"]["geomean_speedup"]["overall"] == {"eager": 1.0, "eager_n": 12,
                                                                             "compile": 1.0, "compile_n": 12}
    assert list(summary["paired_bootstrap_vs_ref"]) == ["m"]  # not the calibration
    assert "calibration" in sm.summarize(rows, reference="ref", resamples=50)["paired_bootstrap_vs_ref"]
    text = sm.markdown_table(summary)
    assert "Calibration: calibration: the reference code submitted as its own answer" in text
    assert "Degenerate problems (zeros, a constant or another input's output passes the tolerance): 2 of 12: " \
           "L2/1 P2_1, L2/2 P2_2." in text
    assert "| m | 10 | 7 (70.0%) |" in text


def test_the_problems_reported_unsound_upstream_are_named_only_for_kernelbench_s_own_files() -> None:
    rows = hand_rows()
    rows.loc[(rows.level == 2) & (rows.problem_id == 1), "problem"] = "Gemm_Max_Subtract_GELU"  # L2/80's name
    rows = pd.concat([rows, rows[(rows.level == 2) & (rows.problem_id == 1)].assign(
        problem_id=80, problem="Gemm_Max_Subtract_GELU")], ignore_index=True)
    rows.loc[rows.problem_id == 5, "problem"] = "MSELoss"  # L1/5 and L2/5: not KernelBench's L1/94
    summary = sm.summarize(rows, reference="ref", resamples=20)
    assert summary["audit"]["known_issues"] == [{"level": 2, "problem_id": 80, "problem": "Gemm_Max_Subtract_GELU",
                                                 "kind": "constant_output",
                                                 "source": "https://github.com/ScalingIntelligence/KernelBench/pull/108"}]
    assert "Reported unsound upstream: L2/80 (constant_output, https://github.com/ScalingIntelligence/KernelBench/pull/108)." \
        in sm.markdown_table(summary)


def test_every_known_issue_names_a_problem_file_of_the_pinned_kernelbench(kb_dir: Path) -> None:
    for issue in KNOWN_ISSUES:
        assert (kb_dir / "KernelBench" / f"level{issue.level}" / f"{issue.problem_id}_{issue.problem}.py").is_file(), issue


# ---------------------------------------------------------------------------------------------------- published


FAILED_EAGER = (1, 95)  # the published level-1 problem whose eager baseline failed


def position_ids(level: int) -> list[int]:
    """Position -> problem id for the construction below; the failed-baseline problem sits last, where no
    model is correct."""
    ids = [i for i in range(1, 101) if (level, i) != FAILED_EAGER]
    random.Random(1000 + level).shuffle(ids)
    return ids + [95] if level == 1 else ids


def tiers(base: list[int], counts: dict[str, int], prefix: str) -> dict[str, set[int]]:
    """fast_1 / 1.5 / 2 sets as prefixes of ``base`` (sorted fast_1 set)."""
    return {k: set(base[: counts[f"{prefix}_fast_{k}"]]) for k in ("1", "1.5", "2")}


def model_rows(model: str, level: int, counts: dict[str, int], strategy: dict[str, int] | None,
               correct: set[int], e1: list[int], c1: list[int], flagged: set[int]) -> list[dict[str, Any]]:
    """Rows of one model at one level from positions of the correct / fast sets; speedups sit exactly on the
    thresholds where an answer must not count, so the strict '>' is exercised at 200-problem scale too."""
    assert len(correct) == counts["correct"] and set(e1) <= correct and set(c1) <= correct
    e = tiers(sorted(e1), counts, "eager")
    c = tiers(sorted(c1), counts, "compile")
    assert flagged <= e["2"] & c["1"]
    assert counts["flags"] == len(flagged)
    assert counts["eager_fast_1_unflagged"] == len(e["1"] - flagged)
    assert counts["compile_fast_1_unflagged"] == len(c["1"] - flagged)
    not_correct = [p for p in range(100) if p not in correct]
    compiled = correct | set(not_correct[: counts["compiled"] - len(correct)])
    keeps: set[int] = set()
    if strategy:
        fast_unflagged = sorted(e["1"] - flagged)
        hybrid = set(fast_unflagged[len(fast_unflagged) - strategy["fast_unflagged_hybrid"]:])
        assert len(fast_unflagged) - len(hybrid) == strategy["fast_unflagged_pure_triton"]
        others = [p for p in sorted(compiled) if p not in fast_unflagged]
        others += [p for p in range(100) if p not in compiled]
        keeps = hybrid | set(others[: strategy["answers_keeping_pytorch_op"] - len(hybrid)])
        assert len(keeps) == strategy["answers_keeping_pytorch_op"]

    def speed(p: int, t: dict[str, set[int]], eager: bool) -> float | None:
        if p not in correct:
            return None
        if eager and p in flagged:
            return 10.5
        if p in t["2"]:
            return 10.0  # not > 10: unflagged
        if p in t["1.5"]:
            return 2.0  # not > 2
        if p in t["1"]:
            return 1.5  # not > 1.5
        return 1.0  # not > 1

    ids = position_ids(level)
    out = []
    for p in range(100):
        se = speed(p, e, True)
        if (level, ids[p]) == FAILED_EAGER:
            assert p not in correct
            se = None
        out.append(row(model, level, ids[p], compiled=p in compiled, correct=p in correct, se=se,
                       sc=speed(p, c, False), keeps=p in keeps))
    return out


def prefix_model(model: str, pub: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for level in (1, 2):
        counts = pub["models"][model]["levels"][str(level)]
        correct = set(range(counts["correct"]))
        out += model_rows(model, level, counts, pub["level2_strategy"].get(model, {}).get(str(level)), correct,
                          list(range(counts["eager_fast_1"])), list(range(counts["compile_fast_1"])),
                          set(range(counts["flags"])))
    return out


def level_splits(gained: int, lost: int, diffs: dict[int, int]) -> list[dict[int, tuple[int, int]]]:
    """Every way to spread gained/lost over levels 1 and 2 so each level's count difference holds."""
    splits = []
    for g1 in range(gained + 1):
        g2, l1 = gained - g1, g1 - diffs[1]
        l2 = g2 - diffs[2]
        if l1 >= 0 and l2 >= 0 and l1 + l2 == lost:
            splits.append({1: (g1, l1), 2: (g2, l2)})
    return splits


def checkpoint_rows(model: str, pub: dict[str, Any], reference: str = "sft") -> list[dict[str, Any]]:
    """A checkpoint built against the prefix-built reference so that, per metric, the gained/lost problems
    match the published paired bootstrap (first feasible split over levels)."""
    boot = pub[f"paired_bootstrap_vs_{reference}"][model]
    key = {"correct": "correct", "fast_eager": "eager_fast_1", "fast_compile": "compile_fast_1"}
    ref_levels, own_levels = pub["models"][reference]["levels"], pub["models"][model]["levels"]
    split = {
        metric: level_splits(boot[metric]["gained"], boot[metric]["lost"],
                             {l: own_levels[str(l)][key[metric]] - ref_levels[str(l)][key[metric]] for l in (1, 2)})[0]
        for metric in key
    }
    out = []
    for level in (1, 2):
        rc = ref_levels[str(level)]
        s, e, c = rc["correct"], rc["eager_fast_1"], rc["compile_fast_1"]
        g, l = split["correct"][level]
        lose_pool = list(range(max(e, c), s))  # correct for the reference but not fast: losing them costs no fast
        correct = (set(range(s)) - set(lose_pool[len(lose_pool) - l:] if l else [])) | set(range(s, s + g))
        sets = {}
        for metric, ref_fast in (("fast_eager", range(e)), ("fast_compile", range(c))):
            gf, lf = split[metric][level]
            kept = sorted(ref_fast)[: len(ref_fast) - lf]
            sets[metric] = kept + sorted(correct - set(ref_fast))[:gf]
        out += model_rows(model, level, own_levels[str(level)], pub["level2_strategy"].get(model, {}).get(str(level)),
                          correct, sets["fast_eager"], sets["fast_compile"], set())
    return out


def tokens_for(model: str, rows: list[dict[str, Any]], pub: dict[str, Any]) -> None:
    """Token counts whose mean is the published one (fable51 lacks one count: 199 known)."""
    mean = pub["models"][model]["mean_completion_tokens"]
    if mean is None:
        return
    known = rows[:-1] if model == "fable51" else rows
    total = round(mean * len(known))
    base, extra = divmod(total, len(known))
    for i, r in enumerate(known):
        r["completion_tokens"] = base + (1 if i < extra else 0)


def published_rows(pub: dict[str, Any]) -> pd.DataFrame:
    rows = []
    checkpoints = set(pub["paired_bootstrap_vs_sft"])
    for model in pub["models"]:
        built = checkpoint_rows(model, pub) if model in checkpoints else prefix_model(model, pub)
        tokens_for(model, built, pub)
        rows += built
    return pd.DataFrame(rows)


def published_context(pub: dict[str, Any]) -> dict[str, Any]:
    benchmark = {k: v for k, v in pub["benchmark"].items() if k != "runtime"}
    return {
        "title": pub["title"],
        "benchmark": benchmark,
        "runtime": pub["benchmark"]["runtime"],
        "models": {name: {k: v for k, v in entry.items() if k in ("label", "generation")}
                   for name, entry in pub["models"].items()},
        "notes": {"level2_strategy": "Level 2 has 63 convolution and 36 GEMM/matmul problems."},
    }


@pytest.fixture(scope="module")
def published() -> dict[str, Any]:
    if not PUBLISHED.exists():
        pytest.skip(f"published file not found at {PUBLISHED}")
    return json.loads(PUBLISHED.read_text())


def test_published_numbers_come_back(published: dict[str, Any]) -> None:
    rows = published_rows(published)
    assert len(rows) == 15 * 200
    compare = list(published["paired_bootstrap_vs_sft"])
    summary = sm.summarize(rows, reference="sft", compare=compare, resamples=100_000, seed=42,
                           context=parse_context(published_context(published)))
    # Every model's levels, tokens, labels and generation; also the key order, via the serialized text.
    assert summary["models"] == published["models"]
    assert json.dumps(summary["models"]) == json.dumps(published["models"])
    # The paired bootstrap, exactly (raw floats such as 3.5000000000000004 included).
    assert summary["paired_bootstrap_vs_sft"] == published["paired_bootstrap_vs_sft"]
    assert summary["paired_bootstrap_vs_sft"]["sft_rl100"]["correct"] == {
        "delta_pp": 3.5000000000000004, "ci95_pp": [1.0, 6.5], "gained": 8, "lost": 1}
    for model, levels in published["level2_strategy"].items():
        assert summary["level2_strategy"][model] == levels
    assert summary["benchmark"] == published["benchmark"]
    assert summary["title"] == published["title"]
    assert summary["level2_strategy_note"].endswith("Level 2 has 63 convolution and 36 GEMM/matmul problems.")


def test_published_interval_insensitive_to_placement() -> None:
    """The interval depends on the problems only through which ones are discordant. For the headline
    comparison (sft_rl100 vs sft on correct: 8 gained, 1 lost) every placement tried gives [1.0, 6.5]
    (bench/NOTES_bootstrap.md: only 2 gained / 1 lost, published [-1.0, 2.5], flips to [-1.0, 2.0] for ~2% of
    placements)."""
    gen = np.random.default_rng(0)
    model, ref = np.zeros((40, 200), bool), np.zeros((40, 200), bool)
    for k in range(40):  # 40 random placements, bootstrapped in one call on the same resamples
        order = gen.permutation(200)
        model[k, order[:51]] = ref[k, order[:51]] = True  # both correct
        model[k, order[51:59]] = True  # gained
        ref[k, order[59:60]] = True  # lost
    for r in sm.paired_bootstrap(model, ref, resamples=100_000, seed=42):
        assert (r.delta_pp, r.ci95_pp, r.gained, r.lost) == (3.5000000000000004, (1.0, 6.5), 8, 1)


# ---------------------------------------------------------------------------------------------------- CLI


@pytest.mark.integration
def test_cli_rerun_is_byte_identical(tmp_path: Path) -> None:
    rows_path = tmp_path / "rows.parquet"
    hand_rows().to_parquet(rows_path, index=False)
    context = tmp_path / "context.json"
    context.write_text(json.dumps({"benchmark": {"name": "hand"}, "runtime": {"gpu": "cpu"},
                                   "models": {"ref": {"label": "R"}, "m": {"label": "M"}}}))
    outputs = []
    for run in ("a", "b"):
        out = tmp_path / run
        proc = subprocess.run(
            [sys.executable, "-m", "workflow_scripts", "summarize", "--rows", str(rows_path), "--out",
             str(out / "summary.json"), "--reference", "ref", "--context", str(context),
             "--markdown", str(out / "table.md")],
            cwd=REPO, capture_output=True, text=True, check=True,
        )
        assert proc.stdout == (out / "table.md").read_text()
        outputs.append([(out / p).read_bytes() for p in ("summary.json", "table.md", "tables/levels.parquet",
                                                           "tables/bootstrap.parquet")])
    assert outputs[0] == outputs[1]
    summary = json.loads(outputs[0][0])
    assert list(summary["models"]) == ["ref", "m"]
    assert summary["benchmark"]["runtime"] == {"gpu": "cpu"}


@pytest.mark.integration
def test_cli_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "workflow_scripts", "summarize", "--help"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    for option in ("--rows", "--out", "--reference", "--compare", "--resamples", "--seed", "--tables-dir",
                   "--figures-dir", "--markdown", "--context"):
        assert option in proc.stdout


@pytest.mark.integration
def test_summary_stage_refuses_rows_of_other_models(tmp_path: Path) -> None:
    """A configured model missing from the rows (or an extra one in them) stops the summary with both lists named,
    instead of a summary.json without it."""
    rows_path = tmp_path / "results" / "evaluations.parquet"
    rows_path.parent.mkdir()
    # Written through the store, as the collect stage writes them: the summary reads no rows the store did not write.
    Store(tmp_path / "store").build({"rows": rows_path}, "collect", "hand-written rows", {}, {},
                                    lambda paths: hand_rows().to_parquet(paths["rows"], index=False))
    environment = tmp_path / "environment.json"
    environment.write_text(json.dumps({"device": "cpu"}))

    def stage(order: list[str]) -> subprocess.CompletedProcess:
        params = {"models": {name: {"label": name} for name in order}, "model_order": order,
                  "summary": {"reference": "ref", "resamples": 50, "seed": 42}}
        return subprocess.run(
            [sys.executable, "-m", "workflow_scripts.stages.summary", "--params", json.dumps(params),
             "--rows", str(rows_path), "--environment", str(environment), "--results", str(tmp_path / "results"),
             "--store", str(tmp_path / "store")], cwd=REPO, capture_output=True, text=True, timeout=300)

    refused = stage(["m", "ref", "new_model"])
    assert refused.returncode == 2 and "holds models ['m', 'ref']" in refused.stderr and "new_model" in refused.stderr
    assert not (tmp_path / "results" / "summary.json").exists()
    done = stage(["m", "ref"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "results" / "summary.json").read_text())["models"]["m"]["levels"]["1"]["n"] == 7


def test_speed_verdicts_beside_the_published_counts() -> None:
    """The calibration model's intervals set the noise band once there are enough of them; each model's correct
    answers get a verdict and eager_fast_p_significant, in the JSON, the levels table and the markdown; the
    published counts do not move."""
    rows = hand_rows()
    plain = sm.summarize(rows, reference="ref", resamples=50)
    rows["speedup_eager_low"] = rows["speedup_eager"] * 0.99
    rows["speedup_eager_high"] = rows["speedup_eager"] * 1.01
    rows["timing_mode"] = "cuda_events"
    calibration = rows[rows.model == "ref"].assign(model="calibration", correct=True, compiled=True,
                                                   speedup_compile=1.0)
    calibration["speedup_eager"] = [1.0 + 0.001 * k for k in range(-6, 6)]  # |speedup - 1| up to 0.6%
    calibration["speedup_eager_low"] = calibration["speedup_eager"] - 0.002
    calibration["speedup_eager_high"] = calibration["speedup_eager"] + 0.002
    rows = pd.concat([rows, calibration], ignore_index=True)
    summary = sm.summarize(rows, reference="ref", resamples=50, calibration=["calibration"])
    assert summary["models"]["m"] == plain["models"]["m"]
    block = summary["speed_verdicts"]
    # 12 calibration answers: too few to measure the band, so the timing mode's default
    assert (block["source"], block["band"], block["calibration_answers"]) == ("default", 0.025, 12)
    m = block["models"]["m"]["overall"]
    # m's correct answers with a known eager speedup: 1.0 same; 1.5, 2.0, 2.0000001, 10.0, 10.5, 1.2 faster;
    # 0.9 slower (0.891-0.909 is below 1/1.025)
    assert (m["eager_faster"], m["eager_slower"], m["eager_same"], m["eager_ambiguous"]) == (6, 1, 1, 0)
    assert m["eager_fast_1_significant"] == 6 and m["eager_fast_2_significant"] == 2  # 10.0, 10.5: 2 x 0.99 < 2.05
    assert block["models"]["calibration"]["overall"]["eager_same"] == 12
    assert block["models"]["calibration"]["overall"]["eager_faster"] == 0
    measured = sm.summarize(pd.concat([rows, calibration.assign(model="calibration2")], ignore_index=True),
                            reference="ref", resamples=50, calibration=["calibration", "calibration2"])
    assert measured["speed_verdicts"]["source"] == "calibration"  # 24 answers: measured on this environment
    # the margin holding 98% of the 24 intervals: their farther ends reach 0.992 (|log| 0.0080) and 1.007
    assert measured["speed_verdicts"]["band"] == pytest.approx(0.0080, abs=0.0003)
    assert measured["speed_verdicts"]["models"]["calibration"]["overall"]["eager_same"] >= 11
    levels = sm.levels_table(summary, rows)
    overall = levels[(levels.model == "m") & (levels.level == "overall")].iloc[0]
    assert overall["eager_faster"] == 6 and overall["eager_fast_1_significant"] == 6
    text = sm.markdown_table(summary)
    assert "Speed verdicts against the eager reference timed beside each answer (noise band 2.5%, default" in text
    assert "| m | 6 | 1 | 1 | 0 | 6 |" in text
    # The fast_eager bootstrap with timing noise: m against the reference, the calibration model left out. Its
    # expected difference counts a correct answer whose interval straddles 1 as half fast, where the published
    # strict count says not fast at a measured 1.0.
    noisy = block["bootstrap_with_timing_noise"]
    assert (noisy["reference"], noisy["metric"], list(noisy["models"])) == ("ref", "fast_eager", ["m"])

    def chances(model: str) -> np.ndarray:
        r = rows[rows.model == model].sort_values(["level", "problem_id"])
        chance = significance.probability_fast(r.speedup_eager.to_numpy(float), r.speedup_eager_low.to_numpy(float),
                                               r.speedup_eager_high.to_numpy(float), 1.0)
        return np.where(r.correct.to_numpy(bool), chance, 0.0)

    expected = 100 * float((chances("m") - chances("ref")).mean())
    low, high = noisy["models"]["m"]["ci95_pp"]
    assert noisy["models"]["m"]["delta_pp"] == pytest.approx(expected) and low <= expected <= high
    assert expected != pytest.approx(summary["paired_bootstrap_vs_ref"]["m"]["fast_eager"]["delta_pp"])


def test_tf32_sensitive_problems_are_listed_beside_the_degenerate_ones() -> None:
    rows = hand_rows()
    rows["tf32_sensitive"] = pd.array([None] * len(rows), dtype="boolean")
    first = rows.sort_values(["level", "problem_id"]).iloc[0]
    rows.loc[(rows.level == first.level) & (rows.problem_id == first.problem_id), "tf32_sensitive"] = True
    summary = sm.summarize(rows, reference="ref", resamples=50)
    assert summary["audit"]["tf32_sensitive_problems"] == [f"L{first.level}/{first.problem_id} {first.problem}"]
    assert summary["models"] == sm.summarize(hand_rows(), reference="ref", resamples=50)["models"]
    assert "TF32-sensitive problems" in sm.markdown_table(summary)


def test_a_placement_spread_turns_a_split_calibration_into_same_and_is_listed() -> None:
    """L2/77 on the H200: the calibration read 1.30 on every block (answer and trusted side on different placements
    of one cuDNN kernel's buffers). With the spread the trusted side measured for that problem, it reads same and
    the problem is listed; the answers of other problems keep the environment's band; the published counts stay."""
    rows = hand_rows()
    rows["timing_mode"] = "cuda_events"
    calibration = rows[rows.model == "ref"].assign(model="calibration", correct=True, compiled=True,
                                                   speedup_compile=1.0)
    calibration["speedup_eager"] = [1.30] + [1.0] * (len(calibration) - 1)
    calibration["speedup_eager_low"] = calibration["speedup_eager"] * 0.999
    calibration["speedup_eager_high"] = calibration["speedup_eager"] * 1.001
    split = pd.concat([rows, calibration], ignore_index=True)
    before = sm.summarize(split, reference="ref", resamples=50, calibration=["calibration"])
    assert before["speed_verdicts"]["models"]["calibration"]["overall"]["eager_faster"] == 1
    first = (split.model.isin(["calibration", "m", "ref"])) & (split.problem_id == split.problem_id.min()) & (
        split.level == split.level.min())
    split["placement_spread"] = np.where(first, 1.31, 1.001)
    after = sm.summarize(split, reference="ref", resamples=50, calibration=["calibration"])
    block = after["speed_verdicts"]
    assert block["models"]["calibration"]["overall"]["eager_faster"] == 0
    assert block["models"]["calibration"]["overall"]["eager_same"] == len(calibration)
    listed = block["placement_sensitive_problems"]
    assert list(listed.values()) == [1.31] and list(listed)[0].startswith(f"L{split.level.min()}/")
    assert after["models"] == before["models"]  # the published counts
    assert "Placement-sensitive problems" in sm.markdown_table(after)
