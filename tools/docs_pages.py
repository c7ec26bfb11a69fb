"""The generated pages of the documentation site, from the code (a mkdocs-gen-files script, mkdocs.yml).

Nothing here is written by hand twice: the command line reference is the typer app's click tree, the grid
reference the grid's JSON Schema (pydantic, ``confgrid schema``), the output schemas the Arrow schemas of the stage
tables and the signal table, the column lists of the results files and the manifest's record fields, and the
Python API page names every public module of analysis/ for mkdocstrings. tests/docs/ imports these functions to
check the pages against the code.

Run by ``mkdocs build`` (the gen-files plugin); ``python tools/docs_pages.py DIR`` writes the pages into DIR.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

import click
import typer

import confgrid.analysis
from confgrid.analysis.closure import CLOSURE_COLUMNS, EDGE_COLUMNS
from confgrid.analysis.evaluation import GAP_COLUMNS, METRIC_COLUMNS, SHIFT_COLUMNS
from confgrid.analysis.signals import SCHEMA as SIGNAL_SCHEMA
from confgrid.analysis.stopping import STOPPING_COLUMNS
from confgrid.analysis.verdicts import VERDICT_COLUMNS
from confgrid.cli.main import app
from confgrid.flows.analyze.plan_size import PLAN_COLUMNS
from confgrid.flows.spec.base import _registry
from confgrid.flows.spec.grid import grid_json_schema
from confgrid.flows.stages.base import STAGES
from confgrid.flows.store.run_store import ShardRecord
from confgrid.flows.studies.refusal_brier import COLUMNS as REFUSAL_BRIER_COLUMNS

ROOT = Path(__file__).resolve().parents[1]

#: Example rules and aggregations the stage schemas are drawn with (their columns repeat per rule/aggregation).
EXAMPLE_RULES = ("containment", "exact_match")
EXAMPLE_AGGREGATIONS = ("geometric_mean", "min_probability")

#: results/<file>: the column list in the code that fixes its columns.
RESULTS_FILES = [
    ("results/metrics.{csv,parquet}", "confgrid.analysis.evaluation.METRIC_COLUMNS", METRIC_COLUMNS),
    ("results/gaps.{csv,parquet}", "confgrid.analysis.evaluation.GAP_COLUMNS", GAP_COLUMNS),
    ("results/shifts.{csv,parquet}", "confgrid.analysis.evaluation.SHIFT_COLUMNS", SHIFT_COLUMNS),
    ("results/verdicts.csv", "confgrid.analysis.verdicts.VERDICT_COLUMNS", VERDICT_COLUMNS),
    ("results/stopping.csv", "confgrid.analysis.stopping.STOPPING_COLUMNS", STOPPING_COLUMNS),
    ("results/edges.csv", "confgrid.analysis.closure.EDGE_COLUMNS", EDGE_COLUMNS),
    ("results/closure.csv", "confgrid.analysis.closure.CLOSURE_COLUMNS", CLOSURE_COLUMNS),
    ("results/refusal_brier.csv", "confgrid.flows.studies.refusal_brier.COLUMNS", REFUSAL_BRIER_COLUMNS),
    ("plan-size --out FILE.csv", "confgrid.flows.analyze.plan_size.PLAN_COLUMNS", PLAN_COLUMNS),
]

#: The registries whose names a grid field takes (flows/spec/base.py ``_registry``), by their kind.
REGISTRY_KINDS = ("backend", "dataset adapter", "prompt", "scoring context", "token aggregation", "correctness rule",
                  "metric", "ECE convention")


def _cell(text: Any) -> str:
    """Text for a Markdown table cell: one line, pipes escaped, and square brackets outside code spans escaped
    (``[a][b]`` would be read as a reference link) and ``<`` written as an entity (``<name>`` is not a tag)."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("[", "\\[").replace("]", "\\]").replace("<", "&lt;")
                    for i, p in enumerate(parts))


def _code(text: Any) -> str:
    return f"`{text}`" if str(text) else ""


# --- the command line --------------------------------------------------------------------------------------------


def cli_commands() -> list[tuple[list[str], click.Command]]:
    """(argv path, click command) of the app and of every visible command under it, in the app's order."""
    out: list[tuple[list[str], click.Command]] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        out.append((path, cmd))
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            if not sub.hidden:
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def _param_row(p: click.Parameter) -> str:
    if isinstance(p, click.Argument):
        name = _code(p.human_readable_name)
    else:
        name = ", ".join(_code(o) for o in [*p.opts, *p.secondary_opts])
    tname = getattr(getattr(p, "type", None), "name", "") or "text"
    kind = "flag" if getattr(p, "is_flag", False) else _cell(tname if p.nargs == 1 else f"{tname} x {p.nargs}")
    default = p.default if not callable(p.default) else None
    shown = "" if default in (None, (), False) and not getattr(p, "is_flag", False) else _code(default)
    if getattr(p, "required", False):
        shown = "required"
    return f"| {name} | {kind} | {shown} | {_cell(getattr(p, 'help', None) or '')} |"


def cli_reference() -> str:
    """The command line reference: every command's usage, help text and parameters."""
    root = typer.main.get_command(app)
    lines = ["# Command line", "",
             "Generated from the typer app (`confgrid.cli.main.app`) by `tools/docs_pages.py`; `confgrid COMMAND "
             "--help` prints the same texts.", ""]
    for path, cmd in cli_commands():
        name = " ".join(["confgrid", *path])
        ctx = click.Context(cmd, info_name=name)
        lines += [f"## {name}" if path else "## confgrid", "", "```text", cmd.get_usage(ctx), "```", ""]
        doc = inspect.cleandoc(cmd.help or "").partition("\f")[0].replace("\b", "")
        if doc:
            lines += [doc, ""]
        params = [p for p in cmd.params if not getattr(p, "hidden", False) and p.name != "help"]
        if params:
            lines += ["| parameter | type | default | help |", "| --- | --- | --- | --- |"]
            lines += [_param_row(p) for p in params]
            lines.append("")
        subs = [(n, c) for n, c in (getattr(cmd, "commands", None) or {}).items() if not c.hidden]
        if subs:
            lines += ["| command | what it does |", "| --- | --- |"]
            lines += [f"| [{_code(n)}](#confgrid-{n}) | {_cell(c.get_short_help_str(200))} |" for n, c in subs]
            lines.append("")
    return "\n".join(lines)


# --- the grid ----------------------------------------------------------------------------------------------------


def _type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A JSON Schema node as a short type: ``integer``, ``string or null``, ``list of ModelSpec`` ..."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop:
        return " or ".join(dict.fromkeys(_type(p, defs) for p in prop["anyOf"]))
    if "const" in prop:
        return _code(json.dumps(prop["const"]))
    if "enum" in prop:
        return "one of " + ", ".join(_code(json.dumps(v)) for v in prop["enum"])
    t = prop.get("type", "any")
    if t == "array":
        items = prop.get("items")
        if isinstance(items, dict) and items:
            return f"list of {_type(items, defs)}"
        if "prefixItems" in prop:
            return "[" + ", ".join(_type(p, defs) for p in prop["prefixItems"]) + "]"
        return "list"
    if t == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"mapping of {_type(prop['additionalProperties'], defs)}"
    return t


def _limits(prop: dict[str, Any]) -> str:
    """Ranges and patterns of a JSON Schema node (and of its branches)."""
    out = []
    for node in [prop, *prop.get("anyOf", [])]:
        for key, word in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"),
                          ("minItems", "items >="), ("maxItems", "items <="), ("minLength", "length >=")):
            if key in node:
                out.append(f"{word} {node[key]}")
        if "pattern" in node:
            out.append(f"pattern `{node['pattern']}`")
    return ", ".join(dict.fromkeys(out))


def grid_reference() -> str:
    """The grid file reference: every section and field with its type, default, allowed values and description."""
    schema = grid_json_schema()
    defs = schema.get("$defs", {})
    lines = ["# Grid file", "",
             "Generated from the pydantic models of `flows/spec/` (the grid's JSON Schema, which `confgrid schema` "
             "writes) by `tools/docs_pages.py`. Every model rejects unknown keys. Names that a registry checks "
             "(backends, prompts, contexts, rules, aggregations, metrics, adapters) are listed under "
             "[Registered names](#registered-names); `confgrid run` also checks paths and the rules across "
             "sections.", "",
             "An editor with the YAML language server completes and checks a grid file that starts with",
             "", "```yaml", "# yaml-language-server: $schema=PATH/TO/grid.schema.json", "```", "",
             "where the schema is [grid.schema.json](../grid.schema.json) or the output of `confgrid schema --out "
             "grid.schema.json`.", ""]

    def section(title: str, node: dict[str, Any]) -> None:
        lines.extend([f"## {title}", "", _cell(node.get("description", "")), ""])
        required = set(node.get("required", ()))
        lines.extend(["| field | type | default | allowed | description |", "| --- | --- | --- | --- | --- |"])
        for name, prop in node.get("properties", {}).items():
            ref = defs.get(prop.get("$ref", "").rsplit("/", 1)[-1], {})
            default = ("required" if name in required else _code(json.dumps(prop["default"])) if "default" in prop
                       else "its defaults" if ref else "")
            # pydantic leaves out a field's description where it repeats the model's own
            about = prop.get("description") or ref.get("description", "")
            lines.append(f"| `{name}` | {_type(prop, defs)} | {_cell(default)} | {_cell(_limits(prop))} | "
                         f"{_cell(about)} |")
        lines.append("")

    section("GridSpec", schema)
    for name in sorted(defs):
        section(name, defs[name])
    lines += ["## Registered names", "",
              "The names a grid may use where a field takes a registered name (a plug-in registered in code adds "
              "to these lists).", "", "| registry | names |", "| --- | --- |"]
    for kind in REGISTRY_KINDS:
        reg = _registry(kind)
        names = reg.names() if hasattr(reg, "names") else sorted(reg)
        lines.append(f"| {kind} | {', '.join(_code(n) for n in sorted(names))} |")
    lines.append("")
    return "\n".join(lines)


# --- the outputs -------------------------------------------------------------------------------------------------


def _schema_table(schema: Any) -> list[str]:
    rows = ["| column | Arrow type |", "| --- | --- |"]
    rows += [f"| `{f.name}` | `{f.type}` |" for f in schema]
    return [*rows, ""]


def _record_fields(cls: type) -> list[tuple[str, str, str]]:
    """(name, type, the comment on its line) of a dataclass's fields, from its source."""
    comments = {}
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+): [^#]*#\s*(.*)$", line)
        if m:
            comments[m.group(1)] = m.group(2)
    return [(f.name, str(f.type), comments.get(f.name, "")) for f in dataclasses.fields(cls)]


def outputs_reference() -> str:
    """The output schemas: stage tables, the signal table, results files' columns and the manifest's records."""
    lines = ["# Output schemas", "",
             "Generated from the code by `tools/docs_pages.py`: the Arrow schemas of the stage tables "
             "(`flows/stages/`, each stage's `schema`) and of the signal table (`analysis/signals.py` `SCHEMA`), "
             "the column lists of the results files and the fields of a manifest record. What the columns mean is "
             "in [Outputs](outputs.md).", "",
             "## Stage tables (`tables/<name>.parquet`)", "",
             f"Drawn for the rules {', '.join(_code(r) for r in EXAMPLE_RULES)} and the aggregations "
             f"{', '.join(_code(a) for a in EXAMPLE_AGGREGATIONS)}: the columns `correct_<rule>` and "
             "`token_score__<aggregation>` repeat for each of a grid's.", ""]
    for name in STAGES.names():
        stage = STAGES.get(name)
        if stage.table_name is None or stage.schema is None:
            continue
        lines += [f"### `tables/{stage.table_name}.parquet` (stage `{name}`)", ""]
        lines += _schema_table(stage.schema(EXAMPLE_AGGREGATIONS, EXAMPLE_RULES))
    lines += ["## The signal table (`tables/signals.parquet`)", "",
              "One row per (unit, item, signal); `analysis/signals.py` `SCHEMA`. `confgrid analyze` reads and "
              "writes the same table.", ""]
    lines += _schema_table(SIGNAL_SCHEMA)
    lines += ["## Results files", "", "| file | columns | defined by |", "| --- | --- | --- |"]
    lines += [f"| `{f}` | {', '.join(_code(c) for c in cols)} | `{where}` |" for f, where, cols in RESULTS_FILES]
    lines += ["", "## Manifest records (`manifest.json`, `shards`)", "",
              "One record per shard (`flows/store/run_store.py` `ShardRecord`).", "",
              "| field | type | note |", "| --- | --- | --- |"]
    lines += [f"| `{n}` | `{_cell(t)}` | {_cell(c)} |" for n, t, c in _record_fields(ShardRecord)]
    lines.append("")
    return "\n".join(lines)


# --- the Python API ----------------------------------------------------------------------------------------------


def analysis_modules() -> list[str]:
    """Every public module of confgrid.analysis (sub-packages included), sorted."""
    out = ["confgrid.analysis"]
    for info in pkgutil.walk_packages(confgrid.analysis.__path__, "confgrid.analysis."):
        if not info.name.rsplit(".", 1)[-1].startswith("_"):
            out.append(info.name)
    return sorted(out)


def api_reference() -> str:
    lines = ["# Python API: `confgrid.analysis`", "",
             "The pure numerical core (metrics, the paired bootstrap, verdicts, the planner): numpy and pandas in, "
             "numbers out, no Ray, no model. Rendered from the numpydoc docstrings by mkdocstrings; the module "
             "list is every module of the package (`tools/docs_pages.py`).", ""]
    for mod in analysis_modules():
        lines += [f"::: {mod}", "    options:", "      heading_level: 2", "      show_submodules: false", ""]
    return "\n".join(lines)


PAGES = {"reference/cli.md": cli_reference, "reference/grid.md": grid_reference,
         "reference/schemas.md": outputs_reference, "reference/api.md": api_reference}


def write_pages(open_file) -> None:
    for path, fn in PAGES.items():
        with open_file(path, "w") as fh:
            fh.write(fn())


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for rel, fn in PAGES.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(fn(), encoding="utf-8")
elif __name__ == "<run_path>":  # run by mkdocs-gen-files (runpy.run_path)
    import mkdocs_gen_files

    write_pages(mkdocs_gen_files.open)
