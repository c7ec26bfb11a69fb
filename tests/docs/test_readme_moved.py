"""README.md's sections moved to the documentation site (issue 40): none of them was dropped.

The README was cut to a short page once every section had a page. The titles of its ``##`` and ``###`` sections
before the cut are recorded here; each must still be a heading of a page of the site (docs/, or CONTRIBUTING.md,
which the site includes), so content that was there has a place a reader can find.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: README.md's section titles before the cut (commit 6f1ddb6)
OLD_TITLES = [
    'What a run does',
    'Results',
    'Definitions',
    'Running a grid',
    'A real model on a GPU machine',
    'A real small model offline (smollm2-135m-instruct)',
    'API models (OpenAI-compatible servers)',
    'The grid file',
    'Datasets',
    'Prompts',
    'JSON elicitation, refusals and repeated runs (studies 003 and 002)',
    'The sensitivity study in one grid',
    'Is my conclusion robust?',
    'How many items does my comparison need? (`confgrid plan-size`)',
    'Stopping a setting once its conclusions are resolved (`execution.stop_when_resolved`)',
    'LifeEval (study 002)',
    'The hard-easy effect',
    'Confidence methods',
    'Backend capabilities',
    "How confgrid's choices differ from LM-Polygraph and lm-evaluation-harness",
    'Capability calibration (study 004)',
    'Resuming, resubmitting, status',
    'Launching on a cluster',
    'Tensor parallelism: which executor',
    'A 72B model next to two 8B models (a plan on paper)',
    'Several nodes, and a node that dies',
    'How the work is scheduled',
    'Comparing runs in the MLflow UI',
    'Analyzing outputs from anywhere',
    'Clustered intervals (`--group-col`, `bootstrap.cluster`)',
    'ECE conventions: which number is which',
    'How far to trust an interval',
    'Accuracy-controlled comparison (study 001, ACE)',
    'The fixture model',
    'Figures and the report',
    'Layout',
    'Adding a study',
    'Adding a stage',
    'Adding an input format to analyze',
    'Tests',
]


def _headings() -> set[str]:
    out = set()
    for page in [*ROOT.glob("docs/**/*.md"), ROOT / "CONTRIBUTING.md"]:
        fence = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("```"):
                fence = not fence
            elif not fence and (m := re.match(r"#{1,4} (.+)$", line)):
                out.add(m.group(1).strip())
    return out


@pytest.mark.parametrize("title", OLD_TITLES)
def test_every_old_readme_section_has_a_page(title):
    assert title in _headings(), f"README section {title!r} is a heading of no page of the site"


def test_readme_is_short_and_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 200, len(lines)
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block == ["python3 -m venv .venv && .venv/bin/pip install -e '.[cpu]' && .venv/bin/confgrid demo",
                     "python3 -m venv .venv && .venv/bin/pip install -e '.[cpu,test]' && .venv/bin/python -m pytest -q"]
    assert text.index("```bash") < 60
    for link in re.findall(r"\]\(((?:docs|benchmarks|actors)/[^)#]+|CONTRIBUTING\.md)", text):
        assert (ROOT / link).exists(), link
