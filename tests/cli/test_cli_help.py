"""Every command's ``--help`` shows its help texts as written (issue 36 item 5).

Typer's rich markup mode read ``[k/B, (k+1)/B), the default), right ((k/B, (k+1)/B]`` (analyze's
``--ece-closure``) as a markup tag and dropped it from the rendered help; the app renders plain text now
(``rich_markup_mode=None`` in cli/main.py). The walk covers every command and sub-command of the click tree, so a
command added later is checked too.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from confgrid.cli.main import app

#: a wide terminal (with terminal_width=400 for click's formatter, which wraps at 80 columns otherwise), so help
#: text is not rewrapped; the comparison normalises whitespace all the same
WIDE = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}
#: rich's panel borders, should help ever be rendered in panels again
_BOX = re.compile(r"[│╭╮╰╯─┃━┏┓┗┛]")


def _norm(text: str) -> str:
    """Whitespace collapsed (click and rich rewrap lines), a line broken after a hyphen joined again."""
    return re.sub(r"(?<=\w)- (?=\w)", "-", " ".join(_BOX.sub(" ", text).split()))


def _commands():
    """(argv path, click command) of the app and of every command and sub-command under it."""
    out = []

    def walk(cmd, path):
        out.append((path, cmd))
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            if not getattr(sub, "hidden", False):
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


COMMANDS = _commands()


def _help(path: list[str]) -> str:
    r = CliRunner().invoke(app, [*path, "--help"], env=WIDE, terminal_width=400)
    assert r.exit_code == 0, r.output
    return r.output


def _doc(cmd) -> str:
    """The command's help as click shows it: dedented, up to a form feed, click's ``\\b`` markers left out."""
    import inspect

    return inspect.cleandoc(cmd.help or "").partition("\f")[0].replace("\b", "")


def test_the_walk_finds_every_command():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"", "run", "analyze", "plan-size", "status", "log", "report", "lifeeval"} <= names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "confgrid")
def test_help_shows_every_help_text_as_written(path):
    cmd = dict((" ".join(p), c) for p, c in COMMANDS)[" ".join(path)]
    shown = _norm(_help(path))
    missing = [f"{'/'.join(getattr(p, 'opts', None) or [p.name])}: {p.help!r}" for p in cmd.params
               if getattr(p, "help", None) and not getattr(p, "hidden", False) and _norm(p.help) not in shown]
    if cmd.help and _norm(_doc(cmd)) not in shown:
        missing.append(f"the command's own help: {_doc(cmd)!r}")
    assert not missing, "help texts not shown as written:\n" + "\n".join(missing)


def test_bracketed_text_survives():
    shown = _norm(_help(["analyze"]))
    assert "left ([k/B, (k+1)/B), the default), right ((k/B, (k+1)/B], R cut" in shown
    assert "A:B[:LABEL],..." in shown


def test_analyze_flags_say_the_spec_fields_descriptions():
    """One source: each option of ``confgrid analyze`` shows its AnalyzeSpec field's description (brackets kept),
    and its default is the spec's (a flag not given leaves the spec's own default)."""
    from confgrid.flows.analyze.spec import FLAGS, AnalyzeSpec
    from confgrid.flows.spec.estimation import VerdictSpec

    cmd = dict((" ".join(p), c) for p, c in COMMANDS)["analyze"]
    shown = _norm(_help(["analyze"]))
    by_flag = {o: p for p in cmd.params for o in (getattr(p, "opts", None) or [])}
    by_flag["INPUT"] = next(p for p in cmd.params if p.name == "input")
    fields = {**{n: f for n, f in AnalyzeSpec.model_fields.items() if n not in ("columns", "verdicts", "chunk_size")},
              **VerdictSpec.model_fields}
    flags = {**FLAGS, **{n: "--" + n.replace("_", "-") for n in VerdictSpec.model_fields}}
    for name, field in fields.items():
        param = by_flag[flags[name].split("/")[0]]
        assert param.default is None, name
        text = field.description
        assert _norm(text[1:]) in _norm(param.help) and _norm(text[1:]) in shown, name
    assert "[k/B, (k+1)/B)" in shown and "OUT/results/metrics.csv" in shown



def test_the_files_analyze_help_names_are_the_files_it_writes(tmp_path):
    """Every OUT/... path in analyze's help exists after an analysis (tracking off: no mlflow.db)."""
    rows = [{"setting": "m/d", "item_id": f"q{i}", "signal": sig, "confidence": (i % 10) / 10 + (0.05 if sig == "a"
             else 0.0), "correct": i % 2} for i in range(40) for sig in ("a", "b")]
    pd.DataFrame(rows).to_csv(tmp_path / "in.csv", index=False)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["analyze", str(tmp_path / "in.csv"), "--out", str(out), "--bootstrap", "50",
                                 "--no-tracking"])
    assert r.exit_code == 0, r.output
    named = set(re.findall(r"OUT/([\w/]+\.\w+)", _norm(_help(["analyze"]))))
    assert {"results/metrics.csv", "results/gaps.csv", "analyze.json"} <= named, named
    absent = sorted(p for p in named - {"mlflow.db"} if not (out / p).is_file())
    assert not absent, f"analyze --help names files it does not write: {absent}"
