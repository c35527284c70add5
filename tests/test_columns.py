"""The one table of column definitions (core/columns.py) and the parquet writer that carries it into every file's
Arrow schema (core/io.py write_parquet). The demo run's files are checked in tests/test_pipeline_e2e.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from workflow_scripts.analysis.tables import analyze_answers, extract_answers
from workflow_scripts.core import columns
from workflow_scripts.core.io import write_parquet
from workflow_scripts.evaluation import timeline
from workflow_scripts.scoring import gpu_timeline
from workflow_scripts.scoring import summary as sm
from workflow_scripts.scoring.rows import COLUMNS, collect_rows, flag_table
from workflow_scripts.suite.kernelbench import Problem, problems_dataframe

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = problems_dataframe([Problem(1, 1, "Add", "KernelBench/level1/1_Add.py", "a" * 64),
                               Problem(2, 1, "Gemm", "KernelBench/level2/1_Gemm.py", "b" * 64)])


def built_tables() -> dict[str, pd.DataFrame]:
    """Every kind of table, as the pipeline's own builders make it."""
    completions = [{"model": "m", "level": 1, "problem_id": 1, "status": "ok", "completion_tokens": 9,
                    "text": "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n"
                            "    def forward(self, x):\n        return x + 1\n```"}]
    answers = extract_answers(completions, PROBLEMS, require_triton=True).assign(model="m")
    static = analyze_answers(answers)
    evaluations = {("m", 1, 1): {"status": "correct", "runtime_ms": 1.0, "flags": ["static:keeps_torch_op"]},
                   ("m", 2, 1): {"status": "missing_completion", "flags": []}}
    baselines = {(1, 1): {"eager_ms": 2.0, "eager_status": "ok", "compile_ms": 1.5, "compile_status": "ok"}}
    rows = collect_rows(PROBLEMS, ["m"], {"m": answers}, {"m": static}, evaluations, baselines,
                        code_version="source:" + "0" * 64)
    reference = rows.assign(model="ref", speedup_eager=0.5)
    both = pd.concat([rows, reference], ignore_index=True)
    summary = sm.summarize(both, reference="ref", resamples=20)
    return {"problems": PROBLEMS, "answers": answers, "static": static, "rows": rows, "flags": flag_table(rows),
            "levels": sm.levels_table(summary, both), "bootstrap": sm.bootstrap_table(summary),
            "gpu_timeline": TIMELINE, "gpu_usage": gpu_timeline.usage(TIMELINE)}


def _timeline() -> pd.DataFrame:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        host = Path(d) / "node"
        timeline.append(host, "lease_exclusive", "0", 10.0, 20.0, purpose="baseline")
        timeline.append(host, "baseline_compile", "0", 10.0, 19.0, problem="1_Add", compile_time_s=5.0)
        timeline.append(host, "timing_answer", "cpu", 30.0, 31.0, problem="1_Add", answer="/tmp/a/answer.py")
        return gpu_timeline.load_spans(d)


TIMELINE = _timeline()


@pytest.mark.parametrize("table", sorted(columns.TABLES))
def test_every_table_the_pipeline_builds_is_written_with_each_column_described(table: str, tmp_path: Path) -> None:
    frame = built_tables()[table]
    path = tmp_path / f"{table}.parquet"
    write_parquet(path, frame, table)
    schema = pq.read_schema(path)
    assert schema.metadata[b"table"] == table.encode()
    assert schema.metadata[b"description"] == columns.TABLES[table].description.encode()
    for name in schema.names:
        definition = columns.table(table).column(name)
        assert schema.field(name).metadata == {b"description": definition.description.encode(),
                                               b"unit": definition.unit.encode()}
    # pandas reads back what it wrote (its nullable dtypes included), and equal tables give equal bytes.
    pd.testing.assert_frame_equal(pd.read_parquet(path), frame.reset_index(drop=True))
    first = path.read_bytes()
    write_parquet(path, frame, table)
    assert path.read_bytes() == first


def test_the_rows_columns_and_their_order_are_the_definitions_table() -> None:
    assert COLUMNS == columns.column_names("rows")
    assert list(built_tables()["rows"].columns) == COLUMNS
    assert "flags" not in COLUMNS  # it would shadow pandas' DataFrame.flags
    assert {"flag_list", "code_version"} <= set(COLUMNS)


def test_a_column_without_a_definition_is_refused_naming_it(tmp_path: Path) -> None:
    frame = built_tables()["flags"].assign(colour="blue")
    with pytest.raises(columns.UndescribedColumnError, match=r"table 'flags' has columns \['colour'\]"):
        write_parquet(tmp_path / "flags.parquet", frame, "flags")
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file
    with pytest.raises(KeyError, match="no parquet table 'flag'"):
        write_parquet(tmp_path / "flags.parquet", built_tables()["flags"], "flag")


def test_every_definition_has_a_description_and_a_unit() -> None:
    for table in columns.TABLES.values():
        assert table.description
        for name, definition in table.columns.items():
            assert definition.description.strip() and definition.unit.strip(), name


def test_every_parquet_writer_call_names_a_defined_table() -> None:
    """Each call of write_parquet in the package and the bench scripts names its table by a literal that exists."""
    calls = []
    for path in sorted((ROOT / "workflow_scripts").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            name = getattr(node, "func", None) and getattr(node.func, "id", getattr(node.func, "attr", None))
            if isinstance(node, ast.Call) and name == "write_parquet":
                table = node.args[2] if len(node.args) > 2 else next((k.value for k in node.keywords
                                                                       if k.arg == "table"), None)
                calls.append((f"{path.relative_to(ROOT)}:{node.lineno}",
                              table.value if isinstance(table, ast.Constant) else None))
    assert len(calls) >= 9, calls
    bad = [(where, table) for where, table in calls if table not in columns.TABLES]
    assert not bad, bad


def test_the_levels_table_describes_the_published_counts_under_its_own_names() -> None:
    names = set(sm.levels_columns())
    assert {sm.table_name(f) for f in sm.level_fields()} | set(sm.STRATEGY_FIELDS) <= names
    assert "flags" not in names and "flagged" in names


def test_a_column_family_describes_each_member_and_refuses_strangers() -> None:
    """The fast_p counts are one family (a member per threshold of scoring/metrics.py): a threshold added there is
    described here without an edit of core/columns.py; a name outside the pattern is not."""
    levels = columns.table("levels")
    assert levels.column("eager_fast_3").description.startswith("correct answers with speedup_eager strictly "
                                                                "greater than 3 (KernelBench's fast_3")
    assert levels.column("compile_fast_1.5_unflagged").description == "compile_fast_1.5 without the flagged answers"
    assert levels.column("eager_fast_x") is None and levels.column("fast_1") is None
    with pytest.raises(ValueError, match="not members of the column family 'fast_counts'"):
        columns.column_names("levels", fast_counts=["eager_fast_1", "colour"], unflagged_fast_counts=[],
                             significant_fast_counts=[], speed_verdicts=[])
    with pytest.raises(ValueError, match="column families"):
        columns.column_names("levels")
