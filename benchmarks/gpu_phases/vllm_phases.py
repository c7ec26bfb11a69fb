"""The vLLM phases of benchmarks/gpu_check.py: confgrid's vLLM path (through the Ray ``ModelActor`` when Ray imports,
else ``VLLMBackend`` directly), a plain ``vllm.LLM`` with vLLM's defaults on the same prompt ids, and float32
parity. The functions run inside the Ray actor (``__ray_call__``) and the worker setup hook are pickled by value
(``ray.cloudpickle.register_pickle_by_value``), so the actor's worker never has to import this folder."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from gpu_phases.common import PROGRESS, _load_prompts, _rate, _tokens


def _vllm_env() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith("VLLM_") or k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}


def _engine_kwargs(ctx: dict) -> dict:
    """Engine settings beyond confgrid's defaults: on CPU (smoke) a small, eager engine."""
    if ctx["mode"] == "smoke":
        # with VLLM_ENABLE_V1_MULTIPROCESSING=0 (set by gpu_check.sh): no engine or worker processes to start
        return {"enforce_eager": True, "max_num_seqs": 16, "max_model_len": ctx["size"]["model"]["max_pos"],
                "distributed_executor_backend": "uni"}
    return {}


def _raw_generate(llm, prompts: list[list[int]], new: int) -> tuple[float, int, int]:
    """Raw ``LLM.generate`` on token ids, greedy, ``ignore_eos``: (seconds, output tokens, prompts)."""
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True, detokenize=False)
    reqs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    t = time.perf_counter()
    outs = llm.generate(reqs, params, use_tqdm=False)
    dt = time.perf_counter() - t
    return dt, sum(len(o.outputs[0].token_ids) for o in outs), len(outs)


def _shutdown_llm(llm) -> None:
    stop = getattr(llm, "shutdown", None)
    if not callable(stop):
        stop = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "shutdown", None)
    if callable(stop):
        try:
            stop()
        except Exception:  # noqa: BLE001 - the process exits next anyway
            pass


def _gen_summary(path: str, reps: list[dict], expected: int) -> dict:
    best = max(reps, key=lambda r: r["tokens_per_s"])
    return {"path": path, "reps": reps, "tokens_per_s": best["tokens_per_s"], "best_of": len(reps),
            "all_lengths_equal_max_new_tokens": all(r["tokens"] == expected for r in reps)}


# functions run inside the Ray actor through __ray_call__ (pickled by value: see _ActorRunner)
def _in_actor_score(worker, pairs):
    t = time.perf_counter()
    res = worker.backend.score(pairs)
    return time.perf_counter() - t, [[float(x) for x in s] for s in res]


def _in_actor_greedy(worker, prompts, new):
    return [list(g.token_ids) for g in worker.backend.generate(prompts, max_new_tokens=new)]


def _in_actor_raw(worker, prompts, new):
    return _raw_generate(worker.backend.llm, prompts, new)


def _in_actor_info(worker):
    import vllm

    return {"provenance": worker.backend.provenance(), "vllm": vllm.__version__, "pid": os.getpid()}


def _smoke_eager_hook():
    """Ray worker setup hook (CPU smoke only): VLLMBackend defaults to an eager, small engine."""
    import functools

    from confgrid.actors import vllm_backend

    init = vllm_backend.VLLMBackend.__init__
    if getattr(init, "_gpu_check_smoke", False):
        return

    @functools.wraps(init)
    def patched(self, model, **kw):
        kw.setdefault("enforce_eager", True)
        kw.setdefault("max_num_seqs", 16)
        if kw.get("distributed_executor_backend") is None:
            kw["distributed_executor_backend"] = "uni"
        init(self, model, **kw)

    patched._gpu_check_smoke = True
    vllm_backend.VLLMBackend.__init__ = patched


def _in_actor_shutdown(worker):
    worker.backend.shutdown()
    return True


def phase_vllm_confgrid(ctx: dict) -> dict:
    size = ctx["size"]
    pr = _load_prompts(ctx)
    model_dir = str(Path(ctx["work"]) / "model")
    main, new = size["main_dtype"], size["gen_new"]
    out: dict = {"engine_started": False}
    t = time.perf_counter()
    import vllm  # noqa: F401 - fail here, clearly, if it does not import

    PROGRESS["vllm_imported"] = out["vllm_imported"] = True
    out["import_s"] = round(time.perf_counter() - t, 1)
    use_ray = bool(ctx["use_ray"])
    if use_ray:
        try:
            import ray  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            out["ray_import_error"] = repr(exc)
            use_ray = False
    runner = _ActorRunner(ctx, model_dir, main) if use_ray else _DirectRunner(ctx, model_dir, main)
    out["path"] = runner.path
    t = time.perf_counter()
    runner.start()
    out["engine_started"] = True
    out["engine"] = {"start_s": round(time.perf_counter() - t, 1), **runner.info()}
    try:
        runner.warm(pr)
        reps = []
        for k, texts in enumerate(pr["gen_texts"]):
            dt, toks, n = runner.generate(texts, pr["gen_ids"][k], new)
            reps.append({"seconds": round(dt, 3), "tokens": toks, "prompts": n, "tokens_per_s": _rate(toks, dt)})
        out["generate"] = _gen_summary(runner.gen_path, reps, size["gen_prompts"] * new)
        raw = []
        for k, ids in enumerate(pr["gen_ids"]):
            dt, toks, n = runner.raw(ids, new)
            raw.append({"seconds": round(dt, 3), "tokens": toks, "prompts": n, "tokens_per_s": _rate(toks, dt)})
        out["raw_same_engine"] = _gen_summary("vllm.LLM.generate on the confgrid engine (ignore_eos)", raw,
                                              size["gen_prompts"] * new)
        runner.score(pr["score_pairs"][:8])  # warm-up
        dt, _ = runner.score(pr["score_pairs"])
        tot, ans = _tokens(pr["score_pairs"])
        out["score"] = {"path": runner.score_path, "dtype": main, "seconds": round(dt, 3), "tokens": tot,
                        "answer_tokens": ans, "tokens_per_s": _rate(tot, dt), "answer_tokens_per_s": _rate(ans, dt)}
        _, lps = runner.score(pr["parity_pairs"])
        out["parity"] = {"logprobs": lps, "greedy": runner.greedy(pr["parity_gen_ids"], size["parity_new"])}
    finally:
        runner.stop()
    return out


def _grid_engine_settings() -> dict:
    """The engine settings the grid passes (ModelConfig defaults of actors/model_actor.py)."""
    try:
        import dataclasses

        from confgrid.actors.model_actor import ModelConfig

        d = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    except Exception:  # noqa: BLE001 - model_actor imports ray; these are its defaults
        d = {"max_num_batched_tokens": 8192, "enable_chunked_prefill": True, "enable_prefix_caching": False,
             "gpu_memory_utilization": 0.85}
    return {k: d[k] for k in ("max_num_batched_tokens", "enable_chunked_prefill", "enable_prefix_caching",
                              "gpu_memory_utilization")}


class _DirectRunner:
    path = "VLLMBackend directly, no Ray (--ray off, the smoke default, or Ray not importable)"
    gen_path = "VLLMBackend.generate(token ids)"
    score_path = "VLLMBackend.score"

    def __init__(self, ctx: dict, model_dir: str, dtype: str) -> None:
        self.ctx, self.model_dir, self.dtype = ctx, model_dir, dtype
        self.be = None

    def start(self) -> None:
        from confgrid.actors.vllm_backend import VLLMBackend

        self.be = VLLMBackend(self.model_dir, dtype=self.dtype, **_grid_engine_settings(), **_engine_kwargs(self.ctx))

    def info(self) -> dict:
        import vllm

        return {"provenance": self.be.provenance(), "vllm": vllm.__version__, "extra_engine_kwargs": _engine_kwargs(self.ctx)}

    def warm(self, pr: dict) -> None:
        self.be.generate(pr["warm_ids"], max_new_tokens=8)

    def generate(self, texts, ids, new):
        t = time.perf_counter()
        gens = self.be.generate(ids, max_new_tokens=new)
        return time.perf_counter() - t, sum(len(g.token_ids) for g in gens), len(gens)

    def raw(self, ids, new):
        return _raw_generate(self.be.llm, ids, new)

    def score(self, pairs):
        t = time.perf_counter()
        res = self.be.score(pairs)
        return time.perf_counter() - t, [[float(x) for x in s] for s in res]

    def greedy(self, ids, new):
        return [list(g.token_ids) for g in self.be.generate(ids, max_new_tokens=new)]

    def stop(self) -> None:
        if self.be is not None:
            self.be.shutdown()


class _ActorRunner:
    path = "Ray ModelActor (actors/model_actor.py start_replica) on a local Ray cluster"
    gen_path = "ModelActor.generate(texts) via ray.get (renders the texts with render_prompt_ids, as the grid does)"
    score_path = "VLLMBackend.score inside the ModelActor (ray __ray_call__), timed in the actor"

    def __init__(self, ctx: dict, model_dir: str, dtype: str) -> None:
        self.ctx, self.model_dir, self.dtype = ctx, model_dir, dtype
        self.handle = None

    def start(self) -> None:
        import ray

        from confgrid.actors.model_actor import ModelConfig, start_replica

        # the functions sent to the actor (and the setup hook) travel by value, as they did from __main__
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        runtime_env: dict = {"env_vars": _vllm_env()}
        if self.ctx["mode"] == "smoke":
            # ModelConfig carries no engine kwargs; on CPU an eager engine starts in seconds instead of minutes.
            runtime_env["worker_process_setup_hook"] = _smoke_eager_hook
        ray.init(address="local", include_dashboard=False, runtime_env=runtime_env, log_to_driver=True, configure_logging=False)
        grid = _grid_engine_settings()
        cfg = ModelConfig(name="gpucheck", model=self.model_dir, backend="vllm", dtype=self.dtype,
                          chat_template=False, **grid)
        self.handle, _ = start_replica(cfg)
        self.ray = ray
        self._info = ray.get(self.handle.__ray_call__.remote(_in_actor_info))
        self._info["ray"] = ray.__version__
        self._info["ray_cluster_resources"] = {k: v for k, v in ray.cluster_resources().items()
                                               if k in ("CPU", "GPU", "memory")}
        self._info["note"] = ("ModelConfig has no engine kwargs: the engine runs with confgrid's settings "
                              "only (torch.compile and CUDA graphs on GPU)"
                              + ("; smoke: enforce_eager=True, max_num_seqs=16, executor uni injected by a Ray worker "
                                 "setup hook" if self.ctx["mode"] == "smoke" else ""))

    def info(self) -> dict:
        return self._info

    def warm(self, pr: dict) -> None:
        self.ray.get(self.handle.generate.remote(pr["warm_texts"], 8))

    def generate(self, texts, ids, new):
        t = time.perf_counter()
        res = self.ray.get(self.handle.generate.remote(list(texts), new))
        dt = time.perf_counter() - t
        for r, p in zip(res, ids, strict=True):
            if r.prompt_tokens != len(p):
                raise RuntimeError(f"ModelActor rendered {r.prompt_tokens} prompt tokens, the raw run sends {len(p)}")
        return dt, sum(r.n_tokens for r in res), len(res)

    def raw(self, ids, new):
        return self.ray.get(self.handle.__ray_call__.remote(_in_actor_raw, ids, new))

    def score(self, pairs):
        return self.ray.get(self.handle.__ray_call__.remote(_in_actor_score, pairs))

    def greedy(self, ids, new):
        return self.ray.get(self.handle.__ray_call__.remote(_in_actor_greedy, ids, new))

    def stop(self) -> None:
        if self.handle is not None:
            try:
                self.ray.get(self.handle.__ray_call__.remote(_in_actor_shutdown), timeout=60)
            except Exception:  # noqa: BLE001
                pass
            self.ray.kill(self.handle)
        try:
            import ray

            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass


def phase_vllm_raw(ctx: dict) -> dict:
    import vllm
    from vllm import LLM

    size = ctx["size"]
    pr = _load_prompts(ctx)
    model_dir = str(Path(ctx["work"]) / "model")
    kwargs = {"dtype": size["main_dtype"], "seed": 0, **_engine_kwargs(ctx)}
    t = time.perf_counter()
    llm = LLM(model_dir, **kwargs)
    out: dict = {"engine": {"start_s": round(time.perf_counter() - t, 1), "vllm": vllm.__version__,
                            "kwargs": kwargs, "note": "vLLM defaults otherwise (prefix caching as vLLM sets it)"}}
    try:
        _raw_generate(llm, pr["warm_ids"], 8)
        reps = []
        for ids in pr["gen_ids"]:
            dt, toks, n = _raw_generate(llm, ids, size["gen_new"])
            reps.append({"seconds": round(dt, 3), "tokens": toks, "prompts": n, "tokens_per_s": _rate(toks, dt)})
        out["generate"] = _gen_summary("vllm.LLM.generate(TokensPrompt, greedy, ignore_eos, detokenize=False)",
                                       reps, size["gen_prompts"] * size["gen_new"])
    finally:
        _shutdown_llm(llm)
    return out


def phase_vllm_fp32(ctx: dict) -> dict:
    from confgrid.actors.vllm_backend import VLLMBackend

    size = ctx["size"]
    pr = _load_prompts(ctx)
    model_dir = str(Path(ctx["work"]) / "model")
    kw = {**_grid_engine_settings(), **_engine_kwargs(ctx), "enforce_eager": True}
    t = time.perf_counter()
    with VLLMBackend(model_dir, dtype="float32", **kw) as be:
        out: dict = {"engine": {"start_s": round(time.perf_counter() - t, 1), "provenance": be.provenance(),
                                "extra_engine_kwargs": {k: v for k, v in kw.items() if k not in _grid_engine_settings()}}}
        out["parity"] = {"logprobs": [[float(x) for x in s] for s in be.score(pr["parity_pairs"])],
                         "greedy": [list(g.token_ids) for g in be.generate(pr["parity_gen_ids"],
                                                                          max_new_tokens=size["parity_new"])]}
    return out


#: What a phase got through before an exception (merged into its error result).
