"""Run a grid: items -> generate -> parse -> grade -> score -> aggregate -> metrics.

The driver expands the grid into (model, dataset) settings, keeps one Ray
actor per model (the model is loaded once and serves every shard of it), and
stores every stage's output as content-keyed Parquet shards (flows/store.py).
A shard whose key is already in the store is reused: running the same grid
twice makes no model call the second time, and the log says so.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import yaml
from tqdm.auto import tqdm

from confgrid import __version__
from confgrid.flows.results import setting_tables
from confgrid.flows.spec import BUNDLED, DatasetSpec, GridSpec, ModelSpec
from confgrid.flows.stages import (
    aggregate_scores,
    generation_requests,
    grade_answers,
    parse_generations,
    score_requests,
    signal_table,
    context_user_text,
)
from confgrid.flows.store import RunStore, shard_key
from confgrid.flows.tracking import Tracker, default_tracking_uri
from confgrid.protocols.contexts import get_context
from confgrid.protocols.items import Item, items_from_table, items_to_table
from confgrid.protocols.prompts import get_prompt

__all__ = ["RunSummary", "run_grid", "init_ray"]

log = logging.getLogger("confgrid")

CHUNK = 64  # prompts per remote call; the unit of progress


@dataclass
class RunSummary:
    """What a run produced."""

    out_dir: Path
    metrics: pd.DataFrame
    gaps: pd.DataFrame
    shifts: pd.DataFrame
    model_calls: int
    reused_shards: int
    computed_shards: int
    parent_run_id: str | None
    tables: dict[str, Path] = field(default_factory=dict)


def init_ray(address: str | None) -> None:
    """Start a local Ray cluster (address None) or join an existing one."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False, "include_dashboard": False}
    if address:
        ray.init(address=address, **{k: v for k, v in kwargs.items() if k != "include_dashboard"})
    else:
        ray.init(**kwargs)


def _model_identity(m: ModelSpec) -> dict[str, Any]:
    return {"model": m.model, "revision": m.revision, "backend": m.backend, "dtype": m.dtype, "chat_template": m.chat_template}


def _load_items(d: DatasetSpec) -> list[Item]:
    from confgrid.protocols.datasets import BUNDLED as BUNDLED_PATHS
    from confgrid.protocols.datasets import load_items

    path = str(BUNDLED_PATHS[d.adapter]) if d.path == BUNDLED else d.path
    return load_items(d.adapter, path, split=d.split, limit=d.limit, seed=d.seed, dataset_name=d.name, **dict(d.columns))


class _Models:
    """Lazily started model actors, one per model, shut down after use."""

    def __init__(self, summary_counter: dict[str, int]) -> None:
        self.handles: dict[str, Any] = {}
        self.counter = summary_counter

    def get(self, m: ModelSpec):
        import ray

        from confgrid.actors.model_actor import ModelActor, ModelConfig, actor_options

        if m.name not in self.handles:
            cfg = ModelConfig(name=m.name, model=m.model, backend=m.backend, dtype=m.dtype, revision=m.revision,
                              chat_template=m.chat_template, batch_size=m.batch_size)
            opts = actor_options(cfg)
            log.info("starting a %s actor for model %s (%s)", m.backend, m.name, opts)
            handle = ModelActor.options(**opts).remote(cfg, opts.get("num_cpus"))
            self.handles[m.name] = handle
            ray.get(handle.ping.remote())
        return self.handles[m.name]

    def release(self, name: str) -> None:
        import ray

        h = self.handles.pop(name, None)
        if h is not None:
            ray.kill(h)


def _call_chunks(method, payloads: list, extra: tuple, desc: str) -> list:
    import ray

    chunks = [payloads[i : i + CHUNK] for i in range(0, len(payloads), CHUNK)]
    refs = [method.remote(c, *extra) for c in chunks]
    out: list = []
    with tqdm(total=len(payloads), desc=desc, unit="q", leave=False) as bar:
        for ref, c in zip(refs, chunks, strict=True):
            out.extend(ray.get(ref))
            bar.update(len(c))
    return out


def run_grid(
    spec: GridSpec,
    out_dir: str | Path,
    *,
    address: str | None = None,
    tracking_uri: str | None = None,
    grid_text: str | None = None,
) -> RunSummary:
    """Execute a validated grid and write every table, result and MLflow run.

    Parameters
    ----------
    spec : GridSpec
        A validated grid (flows/spec.py); validation has already happened, so
        nothing here fails on a bad field before a model is loaded.
    out_dir : path
        Output directory; created if missing. Reusing a directory reuses
        every stored shard whose key still matches.
    address : str, optional
        Ray cluster address; None starts a local cluster.
    tracking_uri : str, optional
        MLflow tracking URI; default ``sqlite:///<out_dir>/mlflow.db``.

    Returns
    -------
    RunSummary
    """
    t0 = time.time()
    store = RunStore(out_dir)
    (store.root / "grid.yaml").write_text(
        grid_text if grid_text is not None else yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False),
        encoding="utf-8",
    )
    counter = {"model_calls": 0, "reused": 0, "computed": 0}
    tracking_uri = tracking_uri or default_tracking_uri(store.root)

    # items: driver-side, cheap, keyed by the dataset spec
    items: dict[str, list[Item]] = {}
    items_tables = []
    for d in spec.datasets:
        its = _load_items(d)
        items[d.name] = its
        key = shard_key("items", {"dataset": d.model_dump(mode="json"), "ids": [i.item_id for i in its]})
        rec = store.begin("items", d.name, key)
        tbl = items_to_table(its)
        store.finish(rec, tbl)
        items_tables.append(tbl)
        log.info("dataset %s: %d items", d.name, len(its))
    tables: dict[str, Path] = {"items": store.write_table("items", items_tables)}

    prompt = get_prompt(spec.elicitation.prompt)
    stage_tables: dict[str, list[pa.Table]] = {k: [] for k in ("generations", "graded", "scores", "signals")}
    signal_frames: dict[tuple[str, str], tuple[pd.DataFrame, dict[str, int]]] = {}
    provenance: dict[str, dict[str, str]] = {}
    models = _Models(counter)
    init_needed = True

    for m in spec.models:
        ident = _model_identity(m)
        for d in spec.datasets:
            setting = f"{m.name}/{d.name}"
            its = items[d.name]
            # generate
            gkey = shard_key("generate", {"model": ident, "prompt": prompt.template, "prompt_id": prompt.id,
                                          "max_new_tokens": spec.elicitation.max_new_tokens, "decoding": "greedy",
                                          "items": [(i.item_id, i.question) for i in its]})
            if store.has_shard("generate", gkey):
                store.reuse("generate", setting, gkey)
                counter["reused"] += 1
                gen = store.read_shard("generate", gkey).to_pandas()
                log.info("%s: reusing %d stored answers (shard %s); no generation", setting, len(gen), gkey[:12])
            else:
                if init_needed:
                    init_ray(address)
                    init_needed = False
                handle = models.get(m)
                rec = store.begin("generate", setting, gkey)
                try:
                    outs = _call_chunks(handle.generate, generation_requests(its, prompt.id),
                                        (spec.elicitation.max_new_tokens,), f"generate {setting}")
                except Exception as exc:
                    store.fail(rec, exc)
                    raise
                counter["model_calls"] += len(outs)
                counter["computed"] += 1
                gen = pd.DataFrame({
                    "model": m.name, "dataset": d.name, "item_id": [i.item_id for i in its], "prompt_id": prompt.id,
                    "sample_idx": 0, "raw_output": [o["text"] for o in outs],
                    "finish_reason": [o["finish_reason"] for o in outs], "n_new_tokens": [o["n_tokens"] for o in outs],
                })
                store.finish(rec, pa.Table.from_pandas(gen, preserve_index=False))
                log.info("%s: generated %d answers", setting, len(gen))
            stage_tables["generations"].append(pa.Table.from_pandas(gen, preserve_index=False))

            # parse + grade: pure, cheap, recomputed from stored answers
            graded = grade_answers(parse_generations(gen), its, spec.correctness.rules, spec.correctness.primary)
            stage_tables["graded"].append(pa.Table.from_pandas(graded, preserve_index=False))

            # score: one shard per context, keyed by the answers it scores
            score_frames = []
            for ctx_id in spec.scoring.contexts:
                ctx = get_context(ctx_id)
                ids, reqs = score_requests(graded, its, ctx_id)
                skey = shard_key("score", {"model": ident, "context": [ctx.user_prompt, get_prompt(ctx.user_prompt).template,
                                                                       ctx.assistant_prefix, ctx.separator],
                                           "requests": [(i, r[3]) for i, r in zip(ids, reqs, strict=True)],
                                           "questions": [(i.item_id, i.question) for i in its]})
                if store.has_shard("score", skey):
                    store.reuse("score", f"{setting}/{ctx_id}", skey)
                    counter["reused"] += 1
                    sc = store.read_shard("score", skey).to_pandas()
                    log.info("%s: reusing %d stored token scores in context %s", setting, len(sc), ctx_id)
                else:
                    if init_needed:
                        init_ray(address)
                        init_needed = False
                    handle = models.get(m)
                    rec = store.begin("score", f"{setting}/{ctx_id}", skey)
                    try:
                        outs = _call_chunks(handle.score, reqs, (), f"score {setting} [{ctx_id}]")
                    except Exception as exc:
                        store.fail(rec, exc)
                        raise
                    counter["model_calls"] += len(outs)
                    counter["computed"] += 1
                    sc = pd.DataFrame({
                        "model": m.name, "dataset": d.name, "item_id": ids, "context_id": ctx_id,
                        "answer_source": "generated", "answer": [r[3] for r in reqs],
                        "logprobs": [o["logprobs"] for o in outs],
                        "answer_token_ids": [o["answer_token_ids"] for o in outs],
                        "n_tokens": [len(o["logprobs"]) for o in outs],
                        "context_tokens": [o["context_tokens"] for o in outs],
                        "backend": m.backend, "dtype": m.dtype,
                    })
                    store.finish(rec, pa.Table.from_pandas(sc, preserve_index=False))
                score_frames.append(sc)
            scores = pd.concat(score_frames, ignore_index=True)
            tokens = aggregate_scores(scores, spec.scoring.aggregation)
            stage_tables["scores"].append(pa.Table.from_pandas(tokens, preserve_index=False))
            sig, dropped = signal_table(graded, tokens, spec.scoring.contexts)
            signal_frames[(m.name, d.name)] = (sig, dropped)
            sig_t = sig.assign(setting=setting, model=m.name, dataset=d.name)
            stage_tables["signals"].append(pa.Table.from_pandas(sig_t, preserve_index=False))
        if m.name in models.handles:
            provenance[m.name] = __import__("ray").get(models.handles[m.name].provenance.remote())
        models.release(m.name)
    store.save_manifest()
    for name, tl in stage_tables.items():
        tables[name] = store.write_table(name, tl)

    # metrics with paired bootstrap intervals
    mets, gaps, shifts = [], [], []
    for (mname, dname), (sig, dropped) in tqdm(signal_frames.items(), desc="bootstrap", unit="setting", leave=False):
        if sig.empty:
            log.warning("%s/%s: no rows left after parsing; metrics are NaN", mname, dname)
            continue
        a, b, c = setting_tables(sig, model=mname, dataset=dname, metrics=spec.metrics.names,
                                 n_bins=spec.metrics.ece_bins, n_resamples=spec.bootstrap.resamples,
                                 base_seed=spec.bootstrap.seed, level=spec.bootstrap.level)
        mets.append(a), gaps.append(b), shifts.append(c)
    metrics_df = pd.concat(mets, ignore_index=True) if mets else pd.DataFrame()
    gaps_df = pd.concat(gaps, ignore_index=True) if gaps else pd.DataFrame()
    shifts_df = pd.concat(shifts, ignore_index=True) if shifts else pd.DataFrame()
    res_dir = store.root / "results"
    res_dir.mkdir(exist_ok=True)
    parse_rates = _parse_rates(stage_tables["graded"], signal_frames)
    outputs = {"metrics": metrics_df, "gaps": gaps_df, "shifts": shifts_df, "settings": parse_rates}
    for name, df in outputs.items():
        df.to_csv(res_dir / f"{name}.csv", index=False)
        df.to_parquet(res_dir / f"{name}.parquet", index=False)
    (res_dir / "report.md").write_text(render_markdown(metrics_df, gaps_df, shifts_df, parse_rates), encoding="utf-8")

    # MLflow: parent + one child per setting, logged from the driver
    parent_id = _log_mlflow(spec, store, tracking_uri, outputs, tables, provenance, counter, time.time() - t0)
    log.info("done in %.1f s: %d model calls, %d shards computed, %d reused",
             time.time() - t0, counter["model_calls"], counter["computed"], counter["reused"])
    return RunSummary(store.root, metrics_df, gaps_df, shifts_df, counter["model_calls"], counter["reused"],
                      counter["computed"], parent_id, tables)


def _parse_rates(graded_tables: list[pa.Table], signal_frames) -> pd.DataFrame:
    rows = []
    for t in graded_tables:
        g = t.to_pandas()
        if g.empty:
            continue
        m, d = g["model"].iloc[0], g["dataset"].iloc[0]
        sig, dropped = signal_frames[(m, d)]
        rows.append({
            "setting": f"{m}/{d}", "model": m, "dataset": d, "items": len(g),
            "parse_rate": float((g["parse_status"] == "ok").mean()),
            "accuracy": float(g.loc[g["parse_status"] == "ok", "correct"].mean()),
            "n_analyzed": int(sig["item_id"].nunique()) if not sig.empty else 0,
            "used_fallback": int(g["used_fallback"].sum()),
            "dropped": "; ".join(f"{k}={v}" for k, v in sorted(dropped.items())),
        })
    return pd.DataFrame(rows)


def _fmt(p: float, lo: float, hi: float) -> str:
    if pd.isna(p):
        return "NaN"
    return f"{p:.3f} [{lo:.3f}, {hi:.3f}]"


def result_matrix(metrics_df: pd.DataFrame) -> pd.DataFrame:
    """Wide view: one row per (setting, signal), one column per metric, 'point [lo, hi]'."""
    if metrics_df.empty:
        return pd.DataFrame()
    df = metrics_df.assign(value=[_fmt(p, lo, hi) for p, lo, hi in zip(metrics_df["point"], metrics_df["lo"], metrics_df["hi"], strict=True)])
    wide = df.pivot_table(index=["setting", "signal"], columns="metric", values="value", aggfunc="first", sort=False)
    cols = [m for m in dict.fromkeys(metrics_df["metric"])]
    return wide[cols].reset_index()


def render_markdown(metrics_df, gaps_df, shifts_df, settings_df) -> str:
    """The results as a Markdown report (results/report.md)."""
    parts = ["# confgrid results", ""]
    if not settings_df.empty:
        parts += ["## Settings", "", settings_df.to_markdown(index=False) if _has_tabulate() else settings_df.to_string(index=False), ""]
    wide = result_matrix(metrics_df)
    if not wide.empty:
        parts += ["## Metrics (point [95% paired bootstrap interval])", "", _md(wide), ""]
    if not gaps_df.empty:
        g = gaps_df.assign(g=[_fmt(p, lo, hi) for p, lo, hi in zip(gaps_df["g"], gaps_df["lo"], gaps_df["hi"], strict=True)])
        parts += ["## Gap g = metric(verbalized) - metric(token)", "", _md(g[["setting", "context", "metric", "g", "excludes_zero"]]), ""]
    if not shifts_df.empty:
        s = shifts_df.assign(shift=[_fmt(p, lo, hi) for p, lo, hi in zip(shifts_df["shift"], shifts_df["lo"], shifts_df["hi"], strict=True)])
        parts += ["## Shift of g between contexts", "", _md(s[["setting", "from_context", "to_context", "metric", "shift", "excludes_zero", "flip", "resolved_flip"]]), ""]
    return "\n".join(parts)


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


def _md(df: pd.DataFrame) -> str:
    if _has_tabulate():
        return df.to_markdown(index=False)
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(x) for x in row) + " |")
    return "\n".join(lines)


def _log_mlflow(spec: GridSpec, store: RunStore, uri: str, outputs: dict[str, pd.DataFrame],
                tables: dict[str, Path], provenance: dict[str, dict[str, str]], counter: dict[str, int],
                seconds: float) -> str | None:
    tracker = Tracker(uri, experiment=f"confgrid/{spec.name}")
    axes = {
        "elicitation.prompt": spec.elicitation.prompt,
        "elicitation.max_new_tokens": spec.elicitation.max_new_tokens,
        "scoring.contexts": list(spec.scoring.contexts),
        "scoring.aggregation": spec.scoring.aggregation,
        "correctness.rules": list(spec.correctness.rules),
        "correctness.primary": spec.correctness.primary,
        "metrics.names": list(spec.metrics.names),
        "metrics.ece_bins": spec.metrics.ece_bins,
        "metrics.ece_estimator": "equal_width",
        "bootstrap.resamples": spec.bootstrap.resamples,
        "bootstrap.seed": spec.bootstrap.seed,
        "bootstrap.level": spec.bootstrap.level,
    }
    met, gaps, settings = outputs["metrics"], outputs["gaps"], outputs["settings"]
    with tracker.parent(run_name=spec.name, params={**axes, "models": [m.name for m in spec.models],
                                                    "datasets": [d.name for d in spec.datasets],
                                                    "confgrid_version": __version__, "python": platform.python_version()},
                        tags={"confgrid.kind": "grid"}) as parent_id:
        for m, d in spec.settings():
            setting = f"{m.name}/{d.name}"
            params = {**axes, "model": m.name, "model.id": m.model, "model.backend": m.backend, "model.dtype": m.dtype,
                      "model.revision": m.revision or "", "model.chat_template": m.chat_template,
                      "dataset": d.name, "dataset.adapter": d.adapter, "dataset.path": d.path,
                      "dataset.limit": d.limit or "all", "dataset.seed": d.seed,
                      **{f"provenance.{k}": v for k, v in provenance.get(m.name, {}).items()}}
            metrics: dict[str, float] = {}
            sub = met[met["setting"] == setting] if not met.empty else met
            for r in sub.itertuples():
                metrics[f"{r.metric}/{r.signal}"] = r.point
                metrics[f"{r.metric}/{r.signal}/lo"] = r.lo
                metrics[f"{r.metric}/{r.signal}/hi"] = r.hi
            gsub = gaps[gaps["setting"] == setting] if not gaps.empty else gaps
            for r in gsub.itertuples():
                metrics[f"gap/{r.metric}/{r.context}"] = r.g
                metrics[f"gap/{r.metric}/{r.context}/lo"] = r.lo
                metrics[f"gap/{r.metric}/{r.context}/hi"] = r.hi
            ssub = settings[settings["setting"] == setting] if not settings.empty else settings
            for r in ssub.itertuples():
                metrics.update({"parse_rate": r.parse_rate, "accuracy": r.accuracy, "n_analyzed": r.n_analyzed})
            tracker.child(run_name=setting, params=params, metrics=metrics, artifacts=[],
                          tags={"confgrid.kind": "setting", "confgrid.setting": setting})
        tracker.log_metrics({"model_calls": counter["model_calls"], "shards_reused": counter["reused"],
                             "shards_computed": counter["computed"], "seconds": seconds})
        res = store.root / "results"
        tracker.log_artifacts([res / f for f in ("metrics.csv", "gaps.csv", "shifts.csv", "settings.csv", "report.md")], "results")
        tracker.log_artifacts(list(tables.values()), "tables")
        tracker.log_artifacts([store.root / "grid.yaml", store.root / "manifest.json"])
    return parent_id
