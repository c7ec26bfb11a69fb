"""What the pages show works (issue 40 item 4): commands, grid snippets, and the README's moved sections.

Commands. Every ``confgrid ...`` line in a fenced block of README.md and docs/ names a command of the app and only options it
has. Each such block is also accounted for by an HTML comment on the line above it:

* ``<!-- needs: cluster -->`` (or ``gpu``, ``api``, ``network``: a Ray cluster, a GPU, an API server or key,
  downloads from the hub), which CI cannot give;
* ``<!-- tested: tests/e2e/test_sensitivity.py -->``: that test runs the block's grids (at a reduced size) and
  its commands; the file must exist and name each ``examples/*.yaml`` the block runs;
* ``<!-- fixture -->``: this file runs every command of the block, in a temporary folder holding the inputs the
  page names (:data:`FIXTURE_INPUTS`), and each must exit 0.

Grid snippets. Every fenced ``yaml`` block whose top-level keys are grid sections (or a list of model entries)
is validated by the grid's own validator (flows/spec/grid.py ``parse_grid``), with a bundled model and dataset
added when the snippet has none; a block that includes a file (``--8<-- "examples/x.yaml"``) loads that file.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
import yaml
from typer.testing import CliRunner

from confgrid.analysis.signals import SCHEMA, conform
from confgrid.cli.main import app
from confgrid.flows.spec.grid import GridSpec, load_grid, parse_grid

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NEEDS = {"cluster", "gpu", "api", "network"}
FIXTURE = ROOT / "tests" / "fixtures" / "analyze_small.csv"
BASE = {"models": [{"name": "fixture", "model": "confgrid-fixture"}],
        "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "path": "bundled"}]}


def _blocks(path: Path):
    """(line number, info string, marker comment or '', lines) of every fenced block of a page."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            info, start, body = lines[i][3:].strip(), i, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            j = start - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            marker = lines[j].strip() if j >= 0 and lines[j].strip().startswith("<!--") else ""
            out.append((start + 1, info, marker, body))
        i += 1
    return out


def _commands(body: list[str]) -> list[str]:
    """The ``confgrid`` command lines of a block (continuation lines joined, comments dropped)."""
    text = "\n".join(body).replace("\\\n", " ")
    cmds = []
    for line in text.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        m = re.search(r"(?:^|[\s/])confgrid\s+(?=[a-z-])(.*)$", line)
        if m and not line.startswith("#"):
            cmds.append(m.group(1).split(" > ")[0].split(" && ")[0].strip())
    return cmds


COMMAND_BLOCKS = [(p, n, marker, _commands(body)) for p in PAGES for n, info, marker, body in _blocks(p)
                  if info in ("bash", "console", "sh", "") and _commands(body)]
YAML_BLOCKS = [(p, n, "\n".join(body)) for p in PAGES for n, info, _, body in _blocks(p) if info == "yaml"]


def _id(block) -> str:
    return f"{block[0].relative_to(ROOT)}:{block[1]}"


def _command(argv: list[str]):
    cmd = typer.main.get_command(app)
    while argv and getattr(cmd, "commands", None) and argv[0] in cmd.commands:
        cmd, argv = cmd.commands[argv[0]], argv[1:]
    return cmd, argv


@pytest.mark.parametrize("block", COMMAND_BLOCKS, ids=_id)
def test_every_command_names_real_options(block):
    root = typer.main.get_command(app)
    for line in block[3]:
        argv = [a for a in re.split(r"[\s\[\]]+", line) if a and a != "..."]
        cmd, rest = _command(argv)
        assert cmd is not root, f"`confgrid {line}`: no such command"
        known = {o for p in cmd.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
        unknown = [a.split("=")[0] for a in rest if a.startswith("--") and a.split("=")[0] not in known]
        assert not unknown, f"`confgrid {line}`: {cmd.name} has no option {unknown}"


@pytest.mark.parametrize("block", COMMAND_BLOCKS, ids=_id)
def test_every_command_block_is_run_or_marked(block):
    page, _, marker, cmds = block
    m = re.fullmatch(r"<!--\s*(needs|tested|fixture)\s*:?\s*(.*?)\s*-->", marker)
    assert m, (f"{_id(block)}: mark the block (<!-- needs: cluster|gpu|api|network -->, <!-- tested: TEST_FILE "
               f"-->) or run it here (<!-- fixture -->)")
    kind, arg = m.groups()
    if kind == "needs":
        assert arg in NEEDS, f"{_id(block)}: needs {arg!r}; allowed {sorted(NEEDS)}"
    elif kind == "tested":
        test = ROOT / arg
        assert test.is_file(), f"{_id(block)}: no test file {arg}"
        text = test.read_text(encoding="utf-8")
        for grid in {g for c in cmds for g in re.findall(r"examples/\w+\.yaml", c)}:
            assert grid in text or Path(grid).name in text, f"{arg} does not run {grid}"


def _fixture_inputs(folder: Path) -> None:
    """The inputs the fixture-run blocks name, written into ``folder``."""
    shutil.copy(FIXTURE, folder / "outputs.csv")
    rng = np.random.default_rng(0)
    rows = []
    for i in range(120):
        y = int(rng.random() < 0.6)
        for sig, conf in (("verbalized", 0.9 if rng.random() < 0.7 else 0.6),
                          ("p_true", float(np.clip(0.35 + 0.4 * y + rng.normal(0, 0.15), 0, 1)))):
            rows.append({"setting": "m/d", "item_id": f"q{i}", "signal": sig, "confidence": conf, "correct": y})
    pd.DataFrame(rows).to_csv(folder / "pilot.csv", index=False)
    gens = pd.DataFrame(rows).assign(question_id=lambda d: "g" + (d["item_id"].str[1:].astype(int) // 4).astype(str))
    gens.to_csv(folder / "generations.csv", index=False)


def _pilot_run(folder: Path) -> None:
    """``runs/pilot``: a run folder holding only its signal table (what plan-size reads), from pilot.csv."""
    d = pd.read_csv(folder / "pilot.csv")
    d = d.rename(columns={"correct": "target"}).assign(
        model="m", dataset="d", answer_set="main", parse_policy="label_or_fallback", refusal="drop",
        rule="containment", target_kind="correct", kind=lambda x: x["signal"], status="ok", align="")
    (folder / "runs" / "pilot" / "tables").mkdir(parents=True)
    to_arrow_table = pa.Table.from_pandas(conform(d), schema=SCHEMA, preserve_index=False)
    pq.write_table(to_arrow_table, folder / "runs" / "pilot" / "tables" / "signals.parquet")


#: inputs a block names that are made before it runs
PREPARE = {"runs/pilot": _pilot_run}


def _python_block_before(page: Path, line: int) -> str | None:
    code = [b for b in _blocks(page) if b[1] == "python" and b[0] < line]
    return "\n".join(code[-1][3]) if code else None


FIXTURE_BLOCKS = [b for b in COMMAND_BLOCKS if re.match(r"<!--\s*fixture", b[2])]


@pytest.mark.parametrize("block", FIXTURE_BLOCKS, ids=_id)
def test_fixture_blocks_run(block, tmp_path, monkeypatch):
    page, line, _, cmds = block
    monkeypatch.chdir(tmp_path)
    _fixture_inputs(tmp_path)
    code = _python_block_before(page, line)
    if code and re.search(r"to_csv\(|to_parquet\(", code):
        exec(compile(code, f"{page.name}:python", "exec"), {})  # the page's own input-writing snippet
    runner = CliRunner()
    for cmd in cmds:
        for path, prep in PREPARE.items():
            if path in cmd and not (tmp_path / path).exists():
                prep(tmp_path)
        argv = [a for a in shlex.split(cmd) if not re.fullmatch(r"\[.*\]", a)]
        argv = [a for a in argv if not (a.startswith("[") or a.endswith("]"))]
        r = runner.invoke(app, argv)
        assert r.exit_code == 0, f"`confgrid {cmd}` exited {r.exit_code}:\n{r.output[-3000:]}"


def _as_grid(text: str) -> dict | None:
    data = yaml.safe_load(text)
    if isinstance(data, list) and data and all(isinstance(x, dict) and "model" in x for x in data):
        data = {"models": data}
    if not isinstance(data, dict) or not set(data) <= set(GridSpec.model_fields):
        return None
    grid = {**BASE, **data}
    if "scoring" not in data and any(m.get("backend") == "openai" for m in grid["models"]):
        grid["scoring"] = {"contexts": []}  # an API model's grid declares no forced scoring (guides/api-models.md)
    return grid


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=_id)
def test_grid_snippets_pass_the_grid_validator(block, tmp_path):
    page, _, text = block
    include = re.fullmatch(r'\s*--8<--\s+"([^"]+)"\s*', text)
    if include:
        load_grid(ROOT / include.group(1))
        return
    grid = _as_grid(text)
    if grid is None:
        pytest.skip("not a grid snippet")
    for ds in grid["datasets"]:  # a page's own data file (data/mine.jsonl): an empty stand-in, the grid is checked
        path = str(ds.get("path", ""))
        if path.endswith((".csv", ".jsonl", ".json", ".parquet")) and not Path(path).is_absolute():
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).touch()
    parse_grid(grid, base_dir=tmp_path, source=_id(block))


def test_there_are_grid_snippets_and_run_blocks():
    assert sum(_as_grid(t) is not None for _, _, t in YAML_BLOCKS) >= 8
    assert len(FIXTURE_BLOCKS) >= 3
