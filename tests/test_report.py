"""The Snakemake report (`snakemake --report`): every figure and table reviewers read is in it, with a caption that
states n, the protocol and the timing mode, and the report opens in a browser.

The captions are rendered the way Snakemake renders them for the demo and the study configuration (fast); one small
demo run (a subset of the demo suite and models, on a temporary copy of the workflow) is reported as HTML and ZIP and
opened in headless Chromium (skipped where Chromium is not installed: `make browser`).
"""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import numpy as np
import pytest
import yaml
from cli import snakemake
from docutils.core import publish_parts
from jinja2 import Environment
from snakemake.iocontainers import InputFiles, Log, OutputFiles, Params, ResourceList, Snakemake, Wildcards
from snakemake.utils import validate

from workflow_scripts.core.layout import figure_names
from workflow_scripts.evaluation.config import fill_protocol_defaults
from workflow_scripts.scoring.captions import PROTOCOL, compose

ROOT = Path(__file__).resolve().parents[1]
RESULTS = yaml.safe_load((ROOT / "config.yaml").read_text())["results_dir"]  # the demo's results folder
CAPTIONS = sorted(p.name for p in (ROOT / "report").glob("*.rst") if p.name != "workflow.rst")
# What each caption is about (the first words a reader sees), by caption file.
CAPTION_SUBJECTS = {
    "fast_p.rst": "fast_p against the speedup threshold p",
    "bootstrap_forest.rst": "Paired bootstrap against the reference model",
    "level2_strategy.rst": "How the fast answers are built",
    "correct_compiled.rst": "Compiled and correct answers per model",
    "summary_markdown.rst": "The headline table",
    "summary_json.rst": "The summary",
    "levels.rst": "Counts per model and level",
    "bootstrap.rst": "Paired bootstrap",
    "flags.rst": "Review flags and rejections",
    "evaluations.rst": "The per-problem rows",
    "gpu_timeline.rst": "The GPU timeline",
    "gpu_usage.rst": "How busy each GPU was",
}
CPU_TIMING = ("CPU wall-clock of Triton", "interpreter", "say nothing about GPU speed")


def load_config(path: Path) -> dict[str, Any]:
    config = yaml.safe_load(path.read_text())
    schema = ROOT / "schemas/config.schema.yaml"
    validate(config, str(schema))  # fills the schema's defaults, as rules/common.smk does
    fill_protocol_defaults(config, schema)  # and the protocol's, from their one home (evaluation/config.py)
    return config


def render_caption(name: str, config: dict[str, Any]) -> str:
    """A caption as Snakemake renders it (snakemake/report/__init__.py): the caption file rules/report.smk composes
    (scoring/captions.py), as Jinja with trim_blocks and lstrip_blocks and the job's `snakemake` object, then
    reStructuredText to HTML."""
    env = Environment(trim_blocks=True, lstrip_blocks=True)
    snakemake = Snakemake(InputFiles(), OutputFiles(), Params(), Wildcards(), 1, ResourceList(), Log(), config,
                          "summary", None)
    text = env.from_string(compose(ROOT / "report" / name)).render(snakemake=snakemake, categories={}, files=[])
    # Captions use "body"; the workflow description "html_body", which keeps its title.
    part = "html_body" if name == "workflow.rst" else "body"
    # Links to other report items resolve only inside a report (Snakemake appends their targets): not checked here.
    return publish_parts(text, writer="html", settings_overrides={"report_level": 5})[part]


def plain(markup: str) -> str:
    """The text a reader sees: tags dropped, entities decoded, whitespace collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", markup)))


def test_every_caption_file_is_known() -> None:
    assert sorted(CAPTION_SUBJECTS) == CAPTIONS


def test_the_shared_protocol_paragraph_is_written_once() -> None:
    """The paragraph every caption ends with (n, correctness, timing) lives in report/_protocol.rst.j2 only: no
    caption file repeats a line of it (scoring/captions.py adds it when rules/report.smk composes the captions), and
    every composed caption ends with it, so that a change of the protocol reaches every item of the report."""
    protocol = (ROOT / "report" / PROTOCOL).read_text()
    # Its lines of text (a bare Jinja tag such as {% set cfg = snakemake.config %} may open any caption).
    shared = {line.strip() for line in protocol.splitlines() if len(line.strip()) > 20 and not line.startswith("{%")}
    for name in CAPTIONS + ["workflow.rst"]:
        repeated = shared & {line.strip() for line in (ROOT / "report" / name).read_text().splitlines()}
        assert not repeated, (name, sorted(repeated)[:3])
        assert compose(ROOT / "report" / name).endswith(protocol) == (name != "workflow.rst"), name


@pytest.mark.parametrize("configfile", ["config.yaml", "config/study.yaml"])
@pytest.mark.parametrize("caption", sorted(CAPTION_SUBJECTS))
def test_caption_states_n_protocol_and_timing_mode(configfile: str, caption: str) -> None:
    config = load_config(ROOT / configfile)
    text = plain(render_caption(caption, config))
    assert CAPTION_SUBJECTS[caption] in text
    ev = config["evaluation"]
    assert f"{len(config['models'])} models ({', '.join(config['models'])})" in text
    assert f"levels {', '.join(map(str, config['suite']['levels']))} of {config['suite']['path']}" in text
    assert f"within atol = {ev['atol']} and rtol = {ev['rtol']} on {ev['correctness_trials']} seeded inputs" in text
    calls = f"mean of {ev['timing_trials']} timed calls after {ev['warmup']} warm-up call"
    assert calls in text
    if ev["device"] == "cuda":
        assert "Timing: CUDA events on the GPU" in text and "interpreter" not in text
        assert "expected: 100 at level 1, 100 at level 2" in text  # the study names its n
        assert f"with a {ev['launch_headroom_us']} us device-side wait after the flush" in text
    else:
        assert all(part in text for part in CPU_TIMING) and "CUDA events" not in text
    assert " ," not in text and " ." not in text and " ;" not in text  # the optional clauses join cleanly


def test_the_captions_state_the_package_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thresholds, the flag limit and the headline statistic reach the captions from their one home
    (scoring/metrics.py, core/records.py) through scoring/captions.py, never typed into a caption."""
    from workflow_scripts.core import records
    from workflow_scripts.scoring import metrics

    monkeypatch.setattr(metrics, "THRESHOLDS", (*metrics.THRESHOLDS, ("3", 3.0)))
    monkeypatch.setattr(metrics, "FLAG_SPEEDUP", 20.0)
    monkeypatch.setattr(records, "HEADLINE_STATISTIC", "median")
    config = load_config(ROOT / "config.yaml")
    assert "compile_fast_p (p = 1, 1.5, 2, 3)" in plain(render_caption("levels.rst", config))
    assert "fast_p for p = 1, 1.5, 2, 3 against" in plain(render_caption("summary_json.rst", config))
    markdown = plain(render_caption("summary_markdown.rst", config))
    assert "fast_1 / fast_1.5 / fast_2 / fast_3 (counts" in markdown and "above 20x over a baseline" in markdown
    assert "at p = 1, 1.5, 2, 3, drawn" in plain(render_caption("fast_p.rst", config))
    assert "more than 20x faster" in plain(render_caption("flags.rst", config))
    ev = config["evaluation"]
    assert f"the median of {ev['timing_trials']} timed calls" in plain(render_caption("bootstrap.rst", config))
    assert f"Timed: median of {ev['timing_trials']} calls" in plain(render_caption("workflow.rst", config))


@pytest.mark.parametrize("configfile", ["config.yaml", "config/study.yaml"])
def test_workflow_description_states_the_timing_mode(configfile: str) -> None:
    config = load_config(ROOT / configfile)
    text = plain(render_caption("workflow.rst", config))
    assert config["summary"]["benchmark"]["name"] in text
    assert f"Models: {len(config['models'])}" in text
    if config["evaluation"]["device"] == "cuda":
        assert "Timing: CUDA events on the GPU" in text
    else:
        assert "Timing: CPU, Triton's interpreter" in text and "says anything about GPU speed" in text


# ------------------------------------------------------------------------------------------ a demo run, reported

DEMO_CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
DEMO_MODELS = tuple(DEMO_CONFIG["models"])
# The demo suite's problems per level ("1": 8, ...), as the report counts them.
DEMO_PROBLEMS = {str(level): len(list((ROOT / DEMO_CONFIG["suite"]["path"] / "KernelBench" / f"level{level}").glob("*.py")))
                 for level in DEMO_CONFIG["suite"]["levels"]}


@pytest.fixture(scope="module")
def report_html(demo_run: Path) -> Path:
    """The session's demo run (conftest ``demo_run``) reported as `snakemake --report report.html` makes it."""
    made = snakemake(demo_run, "--report", "report.html", timeout=600)
    assert made.returncode == 0, made.stderr[-5000:]
    return demo_run / "report.html"


def embedded(page: str, name: str) -> Any:
    """A value the report embeds as JSON (var <name> = ...;), not a bundled library's variable of that name."""
    for found in re.finditer(rf'var {name} = (?=[{{\["])', page):
        try:
            return json.JSONDecoder().raw_decode(page, found.end())[0]
        except json.JSONDecodeError:
            continue
    raise AssertionError(f"the report embeds no JSON value {name}")


def reported_files(work: Path) -> dict[str, str]:
    """Every file reviewers read after a run -> the caption file it should carry."""
    levels = sorted(int(level) for level in DEMO_PROBLEMS)
    files = {f"{RESULTS}/figures/{stem}.{ext}": ("fast_p.rst" if stem.startswith("fast_p") else f"{stem}.rst")
             for stem in figure_names(levels) for ext in ("png", "svg")}
    files |= {str(p.relative_to(work)): f"{p.stem}.rst" for p in (work / RESULTS / "tables").glob("*.parquet")}
    files |= {f"{RESULTS}/summary.md": "summary_markdown.rst", f"{RESULTS}/summary.json": "summary_json.rst",
              f"{RESULTS}/evaluations.parquet": "evaluations.rst"}
    return files


@pytest.mark.integration
def test_report_holds_every_figure_and_table_with_its_caption(demo_run: Path, report_html: Path) -> None:
    page = report_html.read_text()
    results = embedded(page, "results")
    expected = reported_files(demo_run)
    assert {f"{RESULTS}/tables/levels.parquet", f"{RESULTS}/tables/bootstrap.parquet",
            f"{RESULTS}/tables/flags.parquet"} <= set(expected)
    assert sorted(results) == sorted(expected)
    n_problems = sum(DEMO_PROBLEMS.values())
    per_level = Counter(DEMO_PROBLEMS)
    for path, caption in expected.items():
        entry = results[path]
        # The report carries the file itself, byte for byte.
        data = entry["data_uri"].split("base64,", 1)[1]
        assert base64.b64decode(data) == (demo_run / path).read_bytes(), path
        text = plain(entry["caption"])
        assert CAPTION_SUBJECTS[caption] in text, path
        assert f"{len(DEMO_MODELS)} models ({', '.join(DEMO_MODELS)})" in text, path
        assert "within atol = 0.0001 and rtol = 0.0001 on 5 seeded inputs" in text, path
        assert all(part in text for part in CPU_TIMING), path
        labels = entry["labels"]
        assert labels["models"] == len(DEMO_MODELS), path
        if "fast_p_level" in path:  # a per-level figure: its level's n
            level = path.split("fast_p_level")[1][0]
            assert labels["figure"] == f"fast_p, level {level} ({per_level[level]} problems)", path
        else:
            by_level = ", ".join(f"level {level}: {n}" for level, n in DEMO_PROBLEMS.items())
            assert labels["problems"] == f"{n_problems} ({by_level})", path
        if path.startswith(f"{RESULTS}/figures/"):
            assert labels["format"] == path.rsplit(".", 1)[1].upper()
    # Navigable: three categories, the figures in subcategories by kind.
    categories = embedded(page, "categories")
    assert sorted(categories) == ["Figures", "Summary", "Tables"]
    assert sorted(categories["Figures"]) == ["Correctness", "Paired bootstrap", "Speed (fast_p)", "Strategy split"]
    assert sorted(categories["Figures"]["Speed (fast_p)"]) == [
        f"{RESULTS}/figures/fast_p_level{lv}.{ext}" for lv in (1, 2) for ext in ("png", "svg")]
    description = plain(embedded(page, "workflow_desc"))
    assert "Timing: CPU, Triton's interpreter" in description and f"Models: {len(DEMO_MODELS)}" in description


@pytest.mark.integration
def test_report_as_zip(demo_run: Path) -> None:
    made = snakemake(demo_run, "--report", "report.zip", timeout=600)
    assert made.returncode == 0, made.stderr[-5000:]
    with zipfile.ZipFile(demo_run / "report.zip") as archive:
        names = archive.namelist()
    assert "report/report.html" in names
    for figure in ("fast_p_level1.png", "bootstrap_forest.svg", "levels.parquet"):
        assert any(name.endswith(figure) for name in names), (figure, names)


# ---------------------------------------------------------------------------------------------- in a browser

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--virtual-time-budget=15000",  # lets the report's scripts run before the page is read
]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("Chromium is not installed (`make browser` installs Debian's chromium as root)")


def open_figure(report: Path, out: Path, result_path: str) -> Path:
    """A copy of the report that opens one figure with its caption once loaded (as a click on it would)."""
    page = report.read_text()
    script = ("<script>window.addEventListener('load', function () { setTimeout(function () {"
              f" var p = {json.dumps(result_path)};"
              " app.setView({navbarMode: 'resultinfo', resultPath: p, content: 'img',"
              " contentPath: results[p].data_uri}); }, 500); });</script>")
    at = page.rindex("</body>")
    out.write_text(page[:at] + script + page[at:])
    return out


def browse(browser: str, page: Path, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                              capture_output=True, text=True, timeout=180)


@pytest.mark.integration
def test_report_opens_in_a_browser(report_html: Path, tmp_path: Path) -> None:
    browser = chromium()
    page = open_figure(report_html, tmp_path / "figure.html", f"{RESULTS}/figures/fast_p_level1.png")
    dom = browse(browser, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-3000:]
    text = plain(dom.stdout)
    # The app rendered: its menu, the figure's labels and caption, and the figure itself as an image.
    assert "fast_p against the speedup threshold p" in text and "say nothing about GPU speed" in text
    assert f"fast_p, level 1 ({DEMO_PROBLEMS['1']} problems)" in text
    assert re.search(r'<img[^>]+src="data:image/png', dom.stdout)
    shot = tmp_path / "report.png"
    taken = browse(browser, page, f"--screenshot={shot}", "--window-size=1400,900")
    assert taken.returncode == 0, taken.stderr[-3000:]
    image = mpimg.imread(shot)
    assert image.shape[:2] == (900, 1400)
    assert np.ptp(image[:, 700:]) > 0.5  # the figure's side of the page is not blank
