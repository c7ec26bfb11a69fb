"""What ``confgrid analyze`` is asked to do: one frozen, typed record (:class:`AnalyzeSpec`), from flags or YAML.

``--spec FILE.yaml`` reads a mapping of the field names (an unknown key is an error); flags given on the command line
override its values. Every check runs when the record is built and raises
:class:`~confgrid.flows.analyze.read.AnalyzeInputError` naming the flag, what is allowed and what was received (never
pydantic's own error), so the Python API, the flags and the YAML file fail alike.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from confgrid.analysis.binning import BIN_CONFIDENCES, MAX_BINS, BinnedNameError
from confgrid.analysis.ace.tables import VIEWS
from confgrid.analysis.conventions import CONVENTIONS, convention_metric
from confgrid.analysis.intervals import INTERVALS
from confgrid.analysis.kernels import has_weighted_kernel
from confgrid.analysis.metrics import CLOSURES
from confgrid.analysis.registry import GRAMMAR, METRICS, check_bins, expand_binned, get_metric, metric_sort_key
from confgrid.analysis.resampling import DEFAULT_CHUNK_SIZE
from confgrid.analysis.verdicts import VerdictRule
from confgrid.flows.analyze.input import AnalyzeWarning
from confgrid.flows.analyze.input import role_columns
from confgrid.flows.analyze.read import FLAGS as COLUMN_FLAGS
from confgrid.flows.analyze.read import AnalyzeInputError
from confgrid.flows.spec.estimation import VerdictSpec
from confgrid.registry import UnknownNameError
from confgrid.yaml_load import safe_load

__all__ = ["AnalyzeSpec", "DEFAULT_METRICS", "FLAGS", "available_metrics", "named", "parse_metrics", "slow_metrics"]

DEFAULT_METRICS = ("ece", "auroc", "aurc", "brier")

#: the fields whose flag is not ``--field-name`` (:data:`FLAGS`: every field's flag, named in every error message)
_FLAG_NAMES = {"input": "INPUT", "n_resamples": "--bootstrap", "n_bins": "--ece-bins",
               "ece_conventions": "--ece-convention", "columns": "--*-col", "track": "--tracking/--no-tracking",
               "use_ray": "--ray/--no-ray", "num_workers": "--workers", "chunk_size": "chunk_size",
               "comparison_resamples": "--comparison-bootstrap", "in_turn": "--in-turn/--whole-file",
               "verdicts": "verdicts"}


def named(field: str) -> str:
    """How a message names an AnalyzeSpec field: its flag, and its spec-file key where the two differ
    (``--bootstrap (n_resamples)``)."""
    flag = FLAGS.get(field, field)
    return flag if flag.lstrip("-").replace("-", "_") == field else f"{flag} ({field})"


def available_metrics() -> list[str]:
    """Every registered metric (the ``--metrics`` choices printed in full), numbers in numeric order."""
    return sorted(METRICS, key=metric_sort_key)


def slow_metrics() -> list[str]:
    """Metrics the bootstrap evaluates one resample at a time (no vectorized kernel)."""
    return sorted(m for m in METRICS if not has_weighted_kernel(m))


def _split(flag: str, value: Any, what: str, item: tuple[type, ...] = (str,)) -> list[Any]:
    """``"a, b"`` or a list/tuple of ``item`` -> the entries as given (split at commas when one string); else
    AnalyzeInputError naming ``flag`` and ``what`` to give."""
    if isinstance(value, str):
        return value.split(",")
    if isinstance(value, (list, tuple)) and all(isinstance(c, item) for c in value):
        return list(value)
    raise AnalyzeInputError(f"{flag}: {value!r}; give {what}")


def _names(value: Any, flag: str = "--metrics") -> list[str]:
    """``"a, b"`` or a list of strings -> stripped, lowercased entries (empty ones kept, for the callers' checks)."""
    return [c.strip().lower() for c in _split(flag, value, "names as a comma-separated string or a list of strings")]


def parse_metrics(metrics: Any) -> list[str]:
    """``"ece,auroc"`` or ``["ece", "auroc"]`` -> checked list; an unknown or duplicate name raises
    AnalyzeInputError naming it and listing the choices."""
    raw = _names(metrics)
    names = [m for m in raw if m]
    choices = available_metrics()
    if not names:
        raise AnalyzeInputError(f"--metrics: name at least one metric; choose from {', '.join(choices)}")
    if len(names) != len(raw):
        raise AnalyzeInputError(f"--metrics: {metrics!r} has an empty entry; give names separated by single commas")
    for m in names:
        try:
            get_metric(m)
        except BinnedNameError as exc:  # a name of the binned-ECE grammar that spells nothing: why, and what works
            raise AnalyzeInputError(f"--metrics: {exc}") from None
        except UnknownNameError as exc:
            if "did you mean" in str(exc):
                raise AnalyzeInputError(f"--metrics: {exc}") from None
            raise AnalyzeInputError(f"--metrics: unknown metric {m!r}; choose from {', '.join(choices)}, or a "
                                    f"binned ECE of the grammar {GRAMMAR}") from None
    dup = sorted({m for m in names if names.count(m) > 1})
    if dup:
        raise AnalyzeInputError(f"--metrics: {', '.join(dup)} given more than once")
    return names


def _parse_views(value: Any) -> tuple[str, ...] | None:
    """``"raw,ia,da,ca"`` or a list -> checked views; None stays None (the default views)."""
    if value is None:
        return None
    views = [v.strip() for v in _split("--views", value, f"a comma-separated string or a list of {', '.join(VIEWS)}")
             if v.strip()]
    bad = [v for v in views if v not in VIEWS]
    if bad or not views:
        raise AnalyzeInputError(f"--views: unknown view(s) {bad or [value]}; allowed: {', '.join(VIEWS)}")
    return tuple(views)


def _parse_pairs(flag: str, value: Any, labelled: bool) -> tuple[tuple[str, ...], ...] | None:
    """``"a:b,c:d"`` or a list of pairs (``[a, b]`` or ``"a:b"``) -> pairs of two different names; ``labelled``
    (model pairs): ``a:b:LABEL`` too, the label ``pair`` when left out. None or ``""``: None. Another form or entry:
    AnalyzeInputError naming ``flag``."""
    if value is None or value == "":
        return None
    form = "'A:B[:LABEL],...' or a list of [A, B, LABEL]" if labelled else "'A:B,C:D' or a list of [A, B] pairs"
    out = []
    for p in _split(flag, value, form, (list, tuple, str)):
        if isinstance(p, str) and not p.strip():
            continue
        bits = [b.strip() if isinstance(b, str) else b for b in (p.split(":") if isinstance(p, str) else p)]
        shown = p if isinstance(p, str) else ':'.join(map(str, p))
        if len(bits) not in ((2, 3) if labelled else (2,)) or not all(isinstance(b, str) and b for b in bits):
            what = "MODEL_A:MODEL_B or MODEL_A:MODEL_B:LABEL" if labelled else \
                "two different signal names (A:B, comma-separated)"
            raise AnalyzeInputError(f"{flag}: {shown!r} is not {what}")
        if bits[0] == bits[1]:
            raise AnalyzeInputError(f"{flag}: {shown!r} pairs {bits[0]!r} with itself; give two different "
                                    f"{'models' if labelled else 'signals'}")
        out.append((*bits, "pair") if len(bits) == 2 and labelled else tuple(bits))
    return tuple(out)


def _choices(flag: str, allowed: Any, at_least: int = 1) -> BeforeValidator:
    """The parser of a field of names from ``allowed``: ``"a,b"`` or a list, each once, at least ``at_least``
    (AnalyzeInputError naming the flag, the value and the choices otherwise)."""
    def parse(value: Any) -> tuple[str, ...]:
        raw = _names(value, flag)
        names = [c for c in raw if c]
        bad = [c for c in names if c not in allowed]
        empty = len(names) != len(raw) and not (at_least == 0 and raw == [""])
        if bad or empty or len(names) < at_least or len(set(names)) != len(names):
            raise AnalyzeInputError(f"{flag}: {value!r}; give {'one or more' if at_least else 'zero or more'} of "
                                    f"{', '.join(allowed)} (comma-separated, each once)")
        return tuple(names)

    return BeforeValidator(parse)


#: Field types parsed from ``"a,b"`` or a list before validation (each error names the flag).
_Metrics = Annotated[tuple[str, ...], BeforeValidator(lambda v: tuple(parse_metrics(v)))]
_Closures = Annotated[tuple[str, ...], _choices("--ece-closure", list(CLOSURES))]
_BinConfidences = Annotated[tuple[str, ...], _choices("--ece-bin-confidence", BIN_CONFIDENCES)]
_Conventions = Annotated[tuple[str, ...], _choices("--ece-convention", list(CONVENTIONS), at_least=0)]
_Views = Annotated[tuple[str, ...] | None, BeforeValidator(_parse_views)]
_Pairs = Annotated[tuple[tuple[str, str, str], ...] | None, BeforeValidator(lambda v: _parse_pairs("--pairs", v, True))]
_SignalPairs = Annotated[tuple[tuple[str, str], ...],
                         BeforeValidator(lambda v: _parse_pairs("--signal-pairs", v, False) or ())]


class AnalyzeSpec(BaseModel):
    """One analysis: the input, the output folder and every option of ``confgrid analyze`` (frozen).

    Build it with keywords (the Python API), from the flags (cli/analyze.py) or from YAML (:meth:`from_yaml`).
    Comma-separated strings are accepted wherever a list is (``metrics="ece,auroc"``) and stored as tuples. An unknown
    key, a value of the wrong type or outside its range, an unknown name: AnalyzeInputError (listing the choices).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Path = Field(description="Per-question outputs: .csv (header row), .jsonl/.ndjson or .parquet/.pq, one "
                        "row per (setting, item_id, signal); or a run's tables/signals.parquet (flows/analyze/roads.py "
                        "lists the readers). Required unless --spec names it.")
    out: Path = Field(description="Output directory: results/ (metrics, gaps, shifts, alignment, edges, closure, "
                      "verdicts; .csv and .parquet), analyze.json, and mlflow.db when it is the MLflow store. "
                      "Required unless --spec names it.")
    metrics: _Metrics = Field(DEFAULT_METRICS, description=f"Comma-separated metrics; choices: "
                                     f"{', '.join(available_metrics())}, and every binned ECE named {GRAMMAR} (each "
                                     f"computed exactly as named). Slow (one call per resample): "
                                     f"{', '.join(slow_metrics()) or 'none'}.")
    n_resamples: int = Field(10_000, description="Paired bootstrap resamples per setting, >= 1.")
    seed: int = Field(0, description="Base seed >= 0; a setting's seed is setting_seed(setting, '', SEED).")
    n_bins: int = Field(10, description=f"The bins of the binned names without their own count (ece, "
                        f"ece_equal_mass, ece_centred; ece_15 has 15), 1 to {MAX_BINS}.")
    ece_closure: _Closures = Field(("left",), description="Bin closures of the unsuffixed binned metrics (ece, "
                                   "ece_<B>, ece_equal_mass), comma-separated: left ([k/B, (k+1)/B), the default), "
                                   "right ((k/B, (k+1)/B], R cut on exact breaks), right_float (right-closed on "
                                   "np.linspace edges: scikit-learn, study 002), left_float (left-closed on "
                                   "np.linspace edges: np.digitize). left,right adds ece_right beside ece; "
                                   "OUT/results/closure.csv lists where they differ. A name with its closure "
                                   "(ece_right) is computed as named.")
    ece_bin_confidence: _BinConfidences = Field(("mean",), description="What stands for a bin's confidence in the "
                                                "unsuffixed fixed-edge (equal-width and centred) binned metrics, comma-"
                                                "separated: mean (of the bin's answers, the default) or midpoint (the "
                                                "bin's centre, as Mueller et al. 2026). mean,midpoint adds "
                                                "ece_midpoint beside ece.")
    ece_conventions: _Conventions = Field((), description="Published ECE conventions to compute beside --metrics, "
                                          "comma-separated, each as the metric ece_NAME: " + ", ".join(CONVENTIONS)
                                          + " (docs/reproductions.md gives each one's source).")
    columns: dict[str, str] = Field(default_factory=dict, description="Role -> column name for roles named "
                                    "differently in the file (setting, item_id, signal, confidence, correct, model, "
                                    "group).")
    tracking_uri: str | None = Field(None, description="MLflow tracking URI (default: $MLFLOW_TRACKING_URI if set, "
                                     "else sqlite:///OUT/mlflow.db).")
    track: bool = Field(True, description="Log the analysis to MLflow (off: only the files).")
    use_ray: bool = Field(False, description="Spread the bootstrap over Ray Data CPU workers (same numbers; joins "
                          "RAY_ADDRESS if set).")
    num_workers: int | None = Field(None, description="With --ray: most CPU workers at once, >= 1 (default: every "
                                    "CPU of the cluster).")
    level: float = Field(0.95, description="Interval level, in (0, 1).")
    interval: str = Field("percentile", description="Interval method: percentile (the default, unchanged), basic "
                          "(reverse percentile), bc (bias-corrected percentile) or jeffreys (plug-in binned ECEs: each "
                          "bin's accuracy drawn from its Jeffreys posterior, honest when every answer is right; other "
                          "metrics keep percentile); docs/concepts/intervals.md gives each one's measured "
                          "coverage. A value whose resamples have no spread is marked degenerate in the interval "
                          "column and resolves nothing.")
    chunk_size: int = Field(DEFAULT_CHUNK_SIZE, description="Resamples per bootstrap chunk, >= 1 (part of the draw).")
    views: _Views = Field(None, description="With a model column: comparison views, e.g. raw,ia,da,ca (default "
                          "raw,ia,da; ca with --candidates).")
    pairs: _Pairs = Field(None, description="With a model column: model pairs A:B[:LABEL],... (default: every pair).")
    candidates: Path | None = Field(None, description="Candidate ratings for the CA view (columns dataset, item_id, "
                                    "candidate, surface, producers, label, rater, method, signal).")
    comparison_resamples: int = Field(2000, description="Paired resamples per comparison cell, >= 1.")
    ia_strata: int | None = Field(None, description="Graded correctness: IA matches scores in the same of this many "
                                  "equal-width strata (default: exact score match).")
    threshold: float | None = Field(None, description="Graded correctness to 0/1: correct >= T counts as correct, T "
                                    "in (0, 1] (Rank-Calibration: ROUGE >= 0.7). Without it AUROC and AURC use "
                                    "graded values as soft labels.")
    uncertainty: str | None = Field(None, description="The confidence column is an uncertainty score u (lower = "
                                    "more confident): exp-neg (c = exp(-u), u >= 0), sigmoid-neg (c = 1/(1 + "
                                    "exp(u))) or rank (within setting and signal); order-preserving, so AUROC and "
                                    "AURC are exact.")
    in_turn: bool | None = Field(None, description="One setting at a time, read from the Parquet row groups that "
                                 "hold it (bounded memory; default for Parquet without a model column).")
    group_col: str | None = Field(None, description="Column naming each item's cluster (e.g. the question of "
                                  "several generations): the bootstrap resamples clusters with all their items.")
    against: str | None = Field(None, description="Compare every signal against this one only (gap = "
                                "metric(AGAINST) - metric(other)); default: every ordered pair, or verbalized for a "
                                "run's tables/signals.parquet.")
    signal_pairs: _SignalPairs = Field((), description="Pairs of signals A:B,C:D to compare (with --against, or "
                                       "instead of every ordered pair; a grid's metrics.pairs).")
    verdicts: VerdictSpec = Field(default_factory=VerdictSpec, description="Thresholds of the robustness "
                                  "verdicts (analysis/verdicts.py).")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _input_error(exc) from None

    @field_validator("columns", mode="before")
    @classmethod
    def _columns(cls, v: Any) -> dict[str, str]:
        if v is None:
            return {}
        if not isinstance(v, dict) or not all(isinstance(r, str) and (c is None or isinstance(c, str))
                                              for r, c in v.items()):
            raise AnalyzeInputError(f"columns (--*-col): {v!r}; give a mapping of role: column name, roles "
                                    f"{', '.join(COLUMN_FLAGS)}")
        return {r: c for r, c in v.items() if c is not None}

    @field_validator("n_resamples", "seed", "n_bins", "chunk_size", "comparison_resamples", "num_workers",
                     "ia_strata", mode="before")
    @classmethod
    def _whole(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, bool):  # pydantic reads true as 1: a 1-resample bootstrap nobody asked for
            raise AnalyzeInputError(f"{named(info.field_name)}: must be an integer, got {v!r}")
        return v

    @field_validator("tracking_uri", mode="before")
    @classmethod
    def _uri(cls, v: Any) -> Any:
        if isinstance(v, str) and v and "://" not in v:
            raise AnalyzeInputError(f"--tracking-uri {v!r} is not a URI; use sqlite:///PATH/mlflow.db (or "
                                    "file:///PATH/mlruns, http://HOST:PORT)")
        return v

    @field_validator("verdicts", mode="before")
    @classmethod
    def _verdicts(cls, v: Any) -> Any:
        if isinstance(v, VerdictRule):
            return VerdictSpec(**{k: getattr(v, k) for k in VerdictSpec.model_fields})
        return v

    @model_validator(mode="after")
    def _check(self) -> "AnalyzeSpec":
        for field, least in (("n_resamples", 1), ("n_bins", 1), ("seed", 0), ("chunk_size", 1),
                             ("comparison_resamples", 1), ("num_workers", 1)):
            value = getattr(self, field)
            if value is not None and value < least:  # an int by now (bools refused by _whole)
                raise AnalyzeInputError(f"{named(field)}: must be an integer >= {least}, got {value!r}")
        if self.n_bins > MAX_BINS:
            raise AnalyzeInputError(f"{named('n_bins')}: must be at most {MAX_BINS} (as a grid's metrics.ece_bins), "
                                    f"got {self.n_bins}")
        try:
            names = expand_binned(list(self.metrics), list(self.ece_closure), list(self.ece_bin_confidence))
        except ValueError as exc:
            raise AnalyzeInputError(f"--ece-closure/--ece-bin-confidence: {exc}") from None
        try:
            check_bins(names, int(self.n_bins))
        except ValueError as exc:
            raise AnalyzeInputError(f"--ece-bins {self.n_bins}: {exc}") from None
        if not 0.0 < self.level < 1.0:
            raise AnalyzeInputError(f"level: must lie in (0, 1), got {self.level!r}")
        if self.interval not in INTERVALS:
            raise AnalyzeInputError(f"--interval: {self.interval!r}; choose from {', '.join(INTERVALS)}")
        role_columns(self.column_roles)  # an unknown role, an empty name, a column in two roles
        return self

    @property
    def metric_names(self) -> list[str]:
        """The metrics computed: ``metrics`` expanded over the closure and bin-confidence axes, then one
        ``ece_<convention>`` per convention (analysis/registry.py ``expand_binned``)."""
        names = expand_binned(list(self.metrics), list(self.ece_closure), list(self.ece_bin_confidence))
        return list(dict.fromkeys([*names, *(convention_metric(c) for c in self.ece_conventions)]))

    @property
    def column_roles(self) -> dict[str, str]:
        """``columns`` with ``group_col`` as the role ``group`` (what the readers take)."""
        return {**self.columns, "group": self.group_col} if self.group_col is not None else dict(self.columns)

    def warn_unused_axes(self) -> None:
        """Warn (:class:`AnalyzeWarning`) when a closure or bin-confidence axis acts on no metric asked for (only the
        unsuffixed binned names take them: analysis/registry.py ``expand_binned``)."""
        names = list(self.metrics)
        takes_axes = expand_binned(names, ["left", "right"]) != list(dict.fromkeys(names))
        for flag, axis, default in (("--ece-closure", self.ece_closure, ("left",)),
                                    ("--ece-bin-confidence", self.ece_bin_confidence, ("mean",))):
            if axis != default and not takes_axes:
                warnings.warn(f"{flag} {','.join(axis)} applies to no metric asked for: it takes effect on the "
                              f"binned names without a closure, bin-confidence or estimator suffix (ece, ece_15, "
                              f"...); got --metrics {','.join(self.metrics)}", AnalyzeWarning, stacklevel=3)

    @classmethod
    def from_yaml(cls, path: str | Path, **override: Any) -> "AnalyzeSpec":
        """The spec of a YAML mapping (keys: the field names), with ``override`` (e.g. the flags given) on top.

        Relative ``input``, ``out`` and ``candidates`` are relative to the file's folder. AnalyzeInputError: the file
        is missing, is not a YAML mapping, or holds an invalid spec.
        """
        path = Path(path)
        try:
            data = safe_load(path.read_text(encoding="utf-8"))  # a repeated key is an error, not the last one
        except (OSError, yaml.YAMLError) as exc:
            raise AnalyzeInputError(f"--spec {str(path)!r}: {exc}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise AnalyzeInputError(f"--spec {str(path)!r}: must be a mapping of field: value, got "
                                    f"{type(data).__name__}")
        for key in ("input", "out", "candidates"):
            if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
                data[key] = str(path.parent / data[key])
        for key in ("columns", "verdicts"):  # a flag overrides one entry of these, not the whole mapping
            if isinstance(data.get(key), dict) and isinstance(override.get(key), dict):
                override = {**override, key: {**data[key], **override[key]}}
        return cls(**{**data, **override})


FLAGS = {f: _FLAG_NAMES.get(f, "--" + f.replace("_", "-")) for f in AnalyzeSpec.model_fields}


def _input_error(exc: ValidationError) -> AnalyzeInputError:
    """The first problem of a pydantic error as an :class:`AnalyzeInputError` naming the flag (or the error itself
    when a check raised one)."""
    err = exc.errors()[0]
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, AnalyzeInputError):
        return inner
    field = str(err["loc"][0]) if err.get("loc") else ""
    if err["type"] == "extra_forbidden":
        if field == "verdicts" and len(err["loc"]) > 1:  # a key inside the nested section: name it, list its keys
            return AnalyzeInputError(f"unknown option verdicts.{err['loc'][-1]}; choose from "
                                     f"{', '.join(VerdictSpec.model_fields)}")
        return AnalyzeInputError(f"unknown option {field!r}; choose from {', '.join(AnalyzeSpec.model_fields)}")
    if err["type"] == "missing":
        return AnalyzeInputError(f"{FLAGS.get(field, field)}: required")
    if field == "verdicts":  # each threshold has its own flag: name it
        text = str(inner) if inner is not None else f"{'.'.join(map(str, err['loc'][1:]))}: {err['msg']}, got " \
            f"{err.get('input')!r}"
        return AnalyzeInputError(re.sub(r"(verdicts\.)?(robust_point_share|robust_resolved_share|fragile_point_share|"
                                        r"robust_min_settings)", lambda m: "--" + m.group(2).replace("_", "-"), text))
    where = ".".join(str(x) for x in err.get("loc", ()))
    return AnalyzeInputError(f"{FLAGS.get(field, field)} ({where}): {err['msg']}, got {err.get('input')!r}")
