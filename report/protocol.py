"""Study 000's section of the report: the run's reporting checklist (the ``protocol`` study,
flows/studies/protocol.py; protocols/checklist.py)."""

from __future__ import annotations

import json
import re

from markdown_it import MarkdownIt  # markdown-it-py: a dependency of rich

from confgrid.protocols.checklist import render_checklist_markdown

from .html import _esc
from .registry import register_section
from .run_tables import RunTables

__all__ = ["checklist"]


@register_section("protocol", "Protocol (reporting checklist)")
def checklist(tables: RunTables) -> str:
    """The run's reporting checklist (study 000 Table 5; results/checklist.json), one block per model and
    dataset, the first open; a checklist of another version as JSON."""
    root = tables.root
    p = root / "results" / "checklist.json"
    if not p.is_file():
        return '<p class="note">This run wrote no results/checklist.json.</p>'
    parts, md = [], MarkdownIt("commonmark", {"html": False}).enable("table")
    for i, e in enumerate(json.loads(p.read_text(encoding="utf-8"))):
        head = f"{e.get('model')} / {e.get('dataset')} / answer set {e.get('extra', {}).get('answer_set', 'main')}"
        try:  # the checklist's own headings sit below this section's
            body = md.render(re.sub(r"^(#+) ", lambda m: "#" * min(len(m.group(1)) + 3, 6) + " ",
                                    render_checklist_markdown(e), flags=re.MULTILINE))
        except (KeyError, TypeError) as exc:  # a checklist of another version: show it as JSON
            body = f"<pre>{_esc(json.dumps(e, indent=1, default=str))}</pre><p class='note'>({_esc(exc)})</p>"
        parts.append(f"<details{' open' if i == 0 else ''}><summary>{_esc(head)}</summary>{body}</details>")
    return "\n".join(parts) + ' <p class="note">Also in <a href="results/checklist.md">results/checklist.md</a> ' \
                               'and <a href="results/checklist.json">results/checklist.json</a>.</p>'
