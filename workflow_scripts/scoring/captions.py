"""The report's captions, composed: each item's own text (``report/<item>.rst``), then the paragraph every caption
shares (n, the correctness protocol, the timing mode: ``report/_protocol.rst.j2``), after a header that gives the
package's definitions to the template (the fast_p thresholds, the headline threshold and statistic, the flag limit).

Why composed: Snakemake renders a caption as a Jinja template without a loader (``Environment.from_string``, in
snakemake/report/__init__.py), so ``{% include %}`` cannot reach a shared file; and the definitions live in the
package (scoring/metrics.py, core/records.py), which a caption cannot import. rules/report.smk writes the composed
captions into a folder of generated files and points report() at them; tests/test_report.py renders the same
composition. The front page (``report/workflow.rst``) gets the header only.
"""

from __future__ import annotations

import json
from pathlib import Path

from workflow_scripts.core import records
from workflow_scripts.core.io import atomic_write_text
from workflow_scripts.scoring import metrics

PROTOCOL = "_protocol.rst.j2"  # the shared paragraph, under the captions' folder
FRONT_PAGE = "workflow"  # the report's front page: no protocol paragraph (it states its own summary, and is short)
SUFFIX = ".rst"


def caption_facts() -> dict[str, object]:
    """What a caption may say of the package's definitions, as Jinja variables."""
    return {
        "fast_p_thresholds": [key for key, _ in metrics.THRESHOLDS],
        "headline_threshold": metrics.HEADLINE_THRESHOLD[0],
        "headline_statistic": records.HEADLINE_STATISTIC,
        "flag_speedup": f"{metrics.FLAG_SPEEDUP:g}",
    }


def _header(source: Path) -> str:
    # trim_blocks (as Snakemake renders) drops the newline after each tag: the header adds no text to the caption.
    lines = [f"{{# composed from {source.name} by workflow_scripts/scoring/captions.py: edit that file #}}"]
    lines += [f"{{% set {name} = {json.dumps(value)} %}}" for name, value in caption_facts().items()]
    return "\n".join(lines) + "\n"


def compose(source: Path) -> str:
    """One caption's template as Snakemake is to render it: the header, the item's text, the shared paragraph."""
    text = source.read_text(encoding="utf-8")
    if source.stem == FRONT_PAGE:
        return _header(source) + text
    protocol = (source.parent / PROTOCOL).read_text(encoding="utf-8")
    return _header(source) + text.rstrip("\n") + "\n\n" + protocol


def caption_sources(folder: Path) -> list[Path]:
    """Every caption file of the report (the front page included)."""
    return sorted(folder.glob(f"*{SUFFIX}"))


def write_captions(folder: Path, target: Path) -> dict[str, str]:
    """Compose every caption of ``folder`` into ``target`` (a file is written only when its content changes, so
    jobs that parse the workflow at once never see one half-written); returns item name -> composed file."""
    target.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    for source in caption_sources(folder):
        path = target / source.name
        text = compose(source)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            atomic_write_text(path, text)
        written[source.stem] = str(path.resolve())
    return written
