"""Studies as registry entries over the one evaluator's estimates: one module of this folder per study view.

A run is plan, execute, collect, signals, evaluate, then the views of the enabled studies (flows/runner.py names none
of them). A study is a subclass of :class:`Study` declared with its name, ``class MyView(Study, name="my_view",
title=..., tables=(...))``, which registers it in :data:`STUDIES`, in its own module of this folder; every
module here is imported by :func:`load_studies`, so a new study is one new file and touches nothing else. Each entry
declares

* ``section``: the grid section whose ``enabled`` turns it on (``enabled()``; None: always on);
* ``signals(table)``: from the run's signal table, rows in units of its own that join the one evaluation's
  bootstrap job (:class:`ProducerRows`: study 004's estimators, study 001's own answers and candidate ratings);
  rows whose pairing :func:`~confgrid.analysis.evaluation.plan_units` does not give are planned by the study's
  entry of flows/evaluate/run_evaluation.py ``UNIT_PLANNERS`` (keyed by their answer set);
* ``view(ev)``: :class:`StudyOutput`, its named result frames (:class:`~confgrid.flows.store.run_store.Frames`,
  written by the one writer), the tables it stored under ``tables/`` and its MLflow metrics (keyed by
  :func:`~confgrid.flows.tracking.keyed_metrics`);
* ``tables`` and ``figures``: the result names ``confgrid show`` and the report read from it.

Its part of ``confgrid show`` and of the report is registered under its name where the printing lives:
``register_show`` (cli/show/<study>.py) and ``register_section`` (report/registry.py).

Registries follow lm-evaluation-harness (``lm_eval/api/registry.py``): a duplicate name is an error, an unknown name
an error listing the choices.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence, TypeVar

import pandas as pd

from confgrid.flows.evaluate.run_evaluation import Evaluation
from confgrid.flows.spec.grid import GridSpec
from confgrid.flows.store.run_store import Frames, RunStore
from confgrid.flows.tables.signals import ProducerRows

log = logging.getLogger("confgrid")
T = TypeVar("T")

__all__ = ["Study", "RunInputs", "StudyOutput", "get_study", "enabled_studies", "load_studies", "STUDIES"]


@dataclass(frozen=True)
class RunInputs:
    """What a run hands every study: the grid, its plan (flows/plan/grid_plan.py ``GridPlan``) and what the executor
    collected: ``done`` (shard key -> its table), ``submitted`` (every ShardRequest), ``units`` ((model, dataset,
    answer set) -> complete :class:`~confgrid.flows.tables.assemble.Unit`), ``methods`` (flows/evaluate/methods.py
    ``MethodTables``), ``rounds`` (flows/evaluate/rounds.py; None without ``execution.stopping``).
    """

    spec: GridSpec
    plan: Any
    done: dict[str, pd.DataFrame]
    submitted: list
    units: dict
    methods: Any
    rounds: Any = None


@dataclass(frozen=True)
class StudyOutput:
    """A study view's result: named frames for ``results/``, tables it stored under ``tables/``, MLflow metrics.

    Attributes
    ----------
    frames : Frames
        Written into ``results/`` by :func:`~confgrid.flows.store.run_store.write_frames`.
    tables : dict
        Table name -> path of a ``tables/<name>.parquet`` it wrote (logged as artifacts with the run's tables).
    metrics : dict
        Parent-run MLflow metrics (keys from :func:`~confgrid.flows.tracking.keyed_metrics`).
    """

    frames: Frames = field(default_factory=Frames)
    tables: dict[str, Path] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class Study:
    """One study view over a run's estimates: subclass it with its class attributes as keywords, ``class MyView(Study,
    name="my_view", title="...", tables=("my_table",))``, which registers it.

    ``name``: the registry key; ``title``: one line, the study (seed file) and what the view adds; ``section``,
    ``tables`` (in the order ``confgrid show`` prints them) and ``figures`` (report/registry.py names): the module
    docstring.
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    section: ClassVar[str | None] = None
    tables: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **attrs: Any) -> None:
        """Set the class attributes given as keywords and register a study given a ``name`` in :data:`STUDIES`.

        Raises
        ------
        TypeError
            An unknown keyword (the message names the allowed ones).
        ValueError
            The name is empty or already registered (by another class).
        """
        super().__init_subclass__()
        for key, value in attrs.items():
            if key not in Study.__annotations__:
                raise TypeError(f"study {cls.__qualname__}: unknown keyword {key!r}; allowed: "
                                f"{', '.join(Study.__annotations__)}")
            setattr(cls, key, value)
        if "name" not in attrs:
            return
        if not cls.name:
            raise ValueError(f"study {cls.__qualname__}: set its class attribute 'name'")
        if cls.name in STUDIES and STUDIES[cls.name] is not cls:
            raise ValueError(f"study {cls.name!r} is already registered (by {STUDIES[cls.name].__module__}); "
                             "choose another name")
        STUDIES[cls.name] = cls

    def __init__(self, run: RunInputs, store: RunStore) -> None:
        self.run = run
        self.spec = run.spec
        self.store = store

    @classmethod
    def enabled(cls, spec: GridSpec) -> bool:
        """Whether the grid asks for this study: its section's ``enabled``, always without a section."""
        return cls.section is None or bool(getattr(spec, cls.section).enabled)

    def signals(self, table: pd.DataFrame) -> Sequence[ProducerRows]:
        """Signal rows in units of its own, evaluated with the run's (default: none); ``table`` is the run's
        signal table (flows/tables/signals.py ``run_signal_table``)."""
        return ()

    def view(self, ev: Evaluation) -> StudyOutput:
        """The study's tables from the evaluation (default: none)."""
        return StudyOutput()

    @staticmethod
    def never_fatal(what: str, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)``, or None when it raises (a view of the data never loses the run; logged as ``what`` with the
        traceback)."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - a view of the data; never lose the run for it
            log.warning("%s: %s: %s", what, type(exc).__name__, exc, exc_info=True)
            return None


#: name -> Study subclass (filled by the modules of this folder on import; see :func:`load_studies`)
STUDIES: dict[str, type[Study]] = {}


def load_studies() -> dict[str, type[Study]]:
    """Import every module of this folder (each registers its studies); returns the registry in name order."""
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    return dict(sorted(STUDIES.items()))


def get_study(name: str) -> type[Study]:
    """The study registered as ``name``.

    Raises
    ------
    KeyError
        Unknown name; the message lists the registered ones.
    """
    studies = load_studies()
    if name not in studies:
        raise KeyError(f"unknown study {name!r}; registered: {', '.join(studies)}")
    return studies[name]


def enabled_studies(spec: GridSpec) -> list[type[Study]]:
    """The studies the grid enables, in name order."""
    return [cls for cls in load_studies().values() if cls.enabled(spec)]
