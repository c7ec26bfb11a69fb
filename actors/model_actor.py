"""The Ray actor that holds one model.

One actor per model replica: it loads the weights once and serves every engine call routed to it
(:meth:`ModelWorker.run`, one or more shards per call, typed payloads of actors/calls.py). Prompts arrive as text
(user turn, assistant prefix, separator, answer); the actor renders them with its own tokenizer and chat template
(protocols/chat.py), so the driver never needs the model's files. An API model (backend ``openai``) has neither: its
text goes to the server as chat messages (actors/openai_backend.py).

Resources are decided in one place, :func:`replica_resources`; the driver's pools (flows/execute/pools.py) decide
when replicas start and stop.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import ray

from confgrid.actors.backend import EngineDied
from confgrid.actors.backends import BACKENDS
from confgrid.actors.calls import (
    CallResult,
    EngineCall,
    GenerateRequest,
    GenerationOutput,
    HiddenStatesOutput,
    NextTokenOutput,
    ReplicaInfo,
    ReplicaReady,
    RequestCounts,
    Sampling,
    SamplesOutput,
    ScoreOutput,
    ScoreRequest,
)
from confgrid.actors.named_models import resolve_model
from confgrid.actors.openai_backend import unwrap
from confgrid.protocols.candidates import candidate_token_ids
from confgrid.protocols.chat import answer_ids, default_system_prompt, effective_separator, render_prompt_ids
from confgrid.registry import Registry

__all__ = ["ModelConfig", "ReplicaResources", "replica_resources", "start_replica", "ModelActor",
           "ModelWorker", "EngineKind", "ENGINE_CALLS", "cpu_thread_binding", "CPU_BIND_ENV"]

_log = logging.getLogger("confgrid")

#: vLLM's variable naming the cores of each CPU rank (``"0|1"``: rank 0 on core 0, rank 1 on core 1).
CPU_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True)
class ModelConfig:
    """What an actor needs to load a model (a plain, picklable copy of ModelSpec)."""

    name: str
    model: str
    backend: str = "transformers"
    dtype: str = "float32"
    revision: str | None = None
    chat_template: bool = True
    batch_size: int = 16
    tensor_parallel_size: int = 1
    executor: str | None = None  # 'mp' or 'ray' for a tensor-parallel vLLM model (ModelSpec.resolved_executor)
    max_num_batched_tokens: int | None = 8192
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    gpu_memory_utilization: float = 0.85
    max_retries: int = 1
    generation_bos: bool | None = None
    scoring_bos: bool | None = None
    max_num_seqs: int | None = None
    chat_template_kwargs: tuple[tuple[str, Any], ...] = ()  # (key, value) pairs: the config stays hashable
    api: Any = None  # backend 'openai': an actors/openai_backend.py ApiConfig

    def template_kwargs(self) -> dict[str, Any]:
        """The model's chat-template arguments as a dict."""
        return dict(self.chat_template_kwargs)


@dataclass(frozen=True)
class ReplicaResources:
    """What one model replica reserves (the one place resources are computed).

    ``actor``: the ``ModelActor.options(...)`` resources of the actor itself. ``bundles``: the placement-group bundles
    (one GPU each, STRICT_PACK) of a tensor-parallel replica with vLLM's Ray executor, else None. ``threads``: torch
    threads of a replica that computes on CPU: the CPUs it reserves (a CPU cluster), or one where the cluster declares
    GPUs that the process cannot see (a local test cluster); None: torch's default. ``per_node``: everything the
    replica needs on ONE node (``{"GPU": g, "CPU": c}``), read by the capacity check, the start order, elastic
    replicas and the timeline. ``note``: why it needs that, for log lines and the capacity error.
    """

    actor: dict[str, Any]
    bundles: list[dict[str, float]] | None
    threads: int | None
    per_node: dict[str, float]
    note: str = ""


def replica_resources(config: ModelConfig, cluster_resources: dict[str, float] | None = None) -> ReplicaResources:
    """Ray resources of one model replica.

    One GPU and one CPU on a GPU cluster; with ``tensor_parallel_size`` N, one actor holding N GPUs and N CPUs
    (executor ``mp``) or a STRICT_PACK placement group of N ``{GPU: 1, CPU: 1}`` bundles whose child tasks the actor
    captures (executor ``ray``); the CPUs of one node (at most 8, N for tensor parallelism) as torch threads on a
    cluster without GPUs; one CPU for an API model. Why each shape: docs/guides/cluster.md ("Tensor parallelism:
    which executor").

    Both tensor-parallel shapes need the same on one node (``per_node``). Whether the replica fits anywhere is
    checked by the caller (``flows/execute/capacity.py``), never here. ``cluster_resources``:
    ``ray.cluster_resources()`` (read from the running cluster when None).

    Examples
    --------
    >>> tp4 = ModelConfig(name="big", model="m", backend="vllm", tensor_parallel_size=4, executor="mp")
    >>> rr = replica_resources(tp4, {"GPU": 8.0, "CPU": 16.0})
    >>> rr.actor, rr.bundles, rr.per_node
    ({'num_gpus': 4, 'num_cpus': 4}, None, {'GPU': 4.0, 'CPU': 4.0})
    >>> replica_resources(ModelConfig(name="big", model="m", backend="vllm", tensor_parallel_size=4, executor="ray"),
    ...                   {"GPU": 8.0, "CPU": 16.0}).per_node == rr.per_node
    True
    >>> replica_resources(tp4, {"CPU": 2.0}).actor  # no GPU in the cluster: 4 CPU cores, one per rank
    {'num_cpus': 4}
    """
    res = cluster_resources if cluster_resources is not None else ray.cluster_resources()
    if config.backend == "openai":
        return ReplicaResources(actor={"num_gpus": 0, "num_cpus": 1}, bundles=None, threads=None,
                                per_node={"CPU": 1.0}, note="one CPU (an API model)")
    gpus = res.get("GPU", 0)
    tp = config.tensor_parallel_size
    if tp > 1 and config.executor == "ray":
        return ReplicaResources(actor={"num_gpus": 0, "num_cpus": 0}, bundles=[{"GPU": 1, "CPU": 1}] * tp,
                                threads=None, per_node={"GPU": float(tp), "CPU": float(tp)},
                                note=f"tensor_parallel_size={tp}, executor ray: a STRICT_PACK placement group of "
                                     f"{tp} {{GPU: 1, CPU: 1}} bundles")
    if tp > 1 and gpus >= 1:
        return ReplicaResources(actor={"num_gpus": tp, "num_cpus": tp}, bundles=None, threads=1,
                                per_node={"GPU": float(tp), "CPU": float(tp)},
                                note=f"tensor_parallel_size={tp}: one actor holding {tp} GPUs, vLLM's "
                                     "multiprocessing executor")
    if tp > 1:
        return ReplicaResources(actor={"num_cpus": tp}, bundles=None, threads=tp, per_node={"CPU": float(tp)},
                                note=f"tensor_parallel_size={tp}: one actor holding {tp} CPU cores (no GPU in the "
                                     "cluster), vLLM's multiprocessing executor, one core per rank")
    if gpus >= 1:
        return ReplicaResources(actor={"num_gpus": 1, "num_cpus": 1}, bundles=None, threads=1,
                                per_node={"GPU": 1.0, "CPU": 1.0}, note="one GPU and one CPU")
    cpus = int(max(1, min(8, res.get("CPU", 1))))
    return ReplicaResources(actor={"num_cpus": cpus}, bundles=None, threads=cpus, per_node={"CPU": float(cpus)},
                            note="the CPUs of one node")


def cpu_thread_binding(ranks: int, cores: list[int] | tuple[int, ...] | set[int], reserved: int) -> str:
    """vLLM's per-rank CPU binding (``VLLM_CPU_OMP_THREADS_BIND``) for a replica that holds ``reserved`` cores.

    Ray gives an actor a number of CPUs, not core ids; the cores are the first ``reserved`` of ``cores`` (those
    this process may run on, ``os.sched_getaffinity(0)``), split into ``ranks`` (``tensor_parallel_size``)
    contiguous groups of equal size, one per rank (cores left over stay unused). vLLM's own default (``auto``) binds
    one NUMA node per rank, so a one-node CPU refuses ``tensor_parallel_size > 1`` without this.

    Returns
    -------
    str
        Core lists separated by ``|``, rank 0 first; cores of one rank joined by ``,``.

    Raises
    ------
    ValueError
        If fewer than ``ranks`` cores are both reserved and usable (the message names both counts).

    Examples
    --------
    >>> cpu_thread_binding(2, {0, 1}, 2)
    '0|1'
    >>> cpu_thread_binding(2, range(16), 4), cpu_thread_binding(3, [4, 5, 6, 7], 4)
    ('0,1|2,3', '4|5|6')
    """
    usable = sorted(cores)[: max(0, int(reserved))]
    if ranks < 1 or len(usable) < ranks:
        raise ValueError(f"tensor_parallel_size={ranks}: a rank needs a core of its own, and the replica holds "
                         f"{len(usable)} usable core(s) ({int(reserved)} CPU(s) from Ray, cores this process may run "
                         f"on: {sorted(cores)}); allowed: tensor_parallel_size <= {len(usable)}")
    per = len(usable) // ranks
    return "|".join(",".join(str(c) for c in usable[r * per:(r + 1) * per]) for r in range(ranks))


def _in_ray(read: Callable[[Any], Any], default: Any) -> Any:
    """``read(ray.get_runtime_context())``, or ``default`` outside a Ray worker (a test builds the worker directly)."""
    try:
        return read(ray.get_runtime_context())
    except Exception:  # noqa: BLE001 - not in a Ray worker
        return default


def _cpu_binding(config: ModelConfig) -> str:
    """The per-rank core lists a tensor-parallel vLLM replica with the multiprocessing executor gives vLLM when it
    computes on CPU (no CUDA device visible); "" for every other replica (vLLM's own default applies)."""
    if config.backend != "vllm" or config.tensor_parallel_size < 2 or (config.executor or "mp") != "mp":
        return ""
    import torch

    if torch.cuda.is_available():
        return ""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    reserved = _in_ray(lambda c: c.get_assigned_resources().get("CPU"), None)  # CPUs Ray assigned to this actor
    return cpu_thread_binding(config.tensor_parallel_size, cores, int(reserved) if reserved else len(cores))


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block (nothing when ``value`` is "")."""
    if not value:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def start_replica(config: ModelConfig, index: int = 0, cluster_resources: dict[str, float] | None = None,
                  load: int = 0):
    """Ask Ray for one model replica; returns ``(actor handle, placement group or None)`` at once.

    The placement group exists only for a tensor-parallel replica with vLLM's Ray executor (``executor: ray``);
    every other replica, tensor-parallel ones with the multiprocessing executor included, is one actor.

    Nothing here waits: Ray creates the actor (and its placement group) when the resources are free, and the
    replica's ``ping`` answers once the model is loaded. The actor restarts at most ``config.max_retries`` times
    after a crash and retries the calls that were in flight as often; an actor killed on purpose (``ray.kill``) is
    not restarted. ``index`` (the replica's index in its pool) and ``load`` (how many times it was started before
    in this run) name the actor.
    """
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    rr = replica_resources(config, cluster_resources)
    opts: dict[str, Any] = dict(rr.actor)
    opts.update(max_restarts=config.max_retries, max_task_retries=config.max_retries,
                name=f"confgrid-{config.name}-{index}-{os.getpid()}-{load}")
    pg = None
    if rr.bundles:
        pg = placement_group(rr.bundles, strategy="STRICT_PACK", name=f"confgrid-{config.name}-{index}-{load}")
        opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_capture_child_tasks=True
        )
    handle = ModelActor.options(**opts).remote(config, rr.threads)
    return handle, pg


class ModelWorker:
    """The model-holding object; :data:`ModelActor` is its Ray actor class.

    A plain class, so it can also run in-process (tests, debugging). ``num_threads``: torch threads, applied when
    the process computes on CPU (:attr:`ReplicaResources.threads`). A tensor-parallel vLLM replica with the
    multiprocessing executor that computes on CPU binds each rank's threads to its own cores: it sets
    ``VLLM_CPU_OMP_THREADS_BIND`` from the cores Ray gave the actor (:func:`cpu_thread_binding`) while the engine
    starts, whatever the environment held; the binding is in :attr:`info` (``cpu_bind``) and the manifest.

    Raises ``UnknownNameError`` (a ``ValueError``) if ``config.backend`` is not registered (actors/backends.py);
    ``OSError`` or ``ValueError`` from the backend when the model cannot be loaded (inside Ray this fails the actor's
    creation, and the driver records it on the model's shards); ``ValueError`` when a CPU tensor-parallel replica
    holds fewer cores than ranks.
    """

    def __init__(self, config: ModelConfig, num_threads: int | None = None) -> None:
        t0 = time.time()
        entry = BACKENDS.get(config.backend)  # an unknown name raises UnknownNameError listing the allowed ones
        if not entry.api:  # an API model loads no torch
            import torch

            if num_threads and not torch.cuda.is_available():
                torch.set_num_threads(int(num_threads))
        self.config = config
        self._candidate_ids: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, dict[int, str]]] = {}
        path = resolve_model(config.model)
        self.api = entry.api
        self._died: Any = None  # the EngineDied of this incarnation, once its engine is gone
        bind = "" if entry.api else _cpu_binding(config)
        if bind:
            _log.info("model %s: tensor_parallel_size=%d on CPU: %s=%r (the cores Ray gave this replica, one "
                      "group per rank)", config.name, config.tensor_parallel_size, CPU_BIND_ENV, bind)
        with _environ(CPU_BIND_ENV, bind):
            self.backend = entry.build(config, path)
        self.tokenizer = self.backend.tokenizer
        node_id, node_ip = _in_ray(lambda c: (c.get_node_id() or "", ray.util.get_node_ip_address() or ""), ("", ""))
        gpu_ids = _in_ray(lambda c: tuple(str(g) for g in c.get_accelerator_ids().get("GPU", [])), ())
        self.info = ReplicaInfo(pid=os.getpid(), host=socket.gethostname(), incarnation=uuid.uuid4().hex,
                                load_seconds=round(time.time() - t0, 3), node_id=node_id, node_ip=node_ip,
                                load_started=round(t0, 3), gpu_ids=gpu_ids, cpu_bind=bind,
                                ranks=tuple(getattr(self.backend, "processes", ()) or ()))

    def ping(self) -> ReplicaReady:
        """The replica has loaded its model: who it is and what it runs.

        Raises ``EngineDied`` once its engine died (the replica answers no call any more; the driver restarts it).
        """
        if self._died is not None:
            raise self._died
        return ReplicaReady(replica=self.info, provenance=self.provenance())

    def provenance(self) -> dict[str, str]:
        prov = dict(self.backend.provenance())
        prov["chat_template"] = str(self.config.chat_template)
        if self.config.chat_template and getattr(self.tokenizer, "chat_template", None):
            prov["system_prompt"] = default_system_prompt(self.tokenizer) or ""
        return prov

    def run(self, call: EngineCall) -> CallResult:
        """Run every request of the call's shards in one engine pass; each shard's outputs under its key, in order.

        Raises ``UnknownNameError`` (a ValueError listing them) if ``call.kind`` is not in :data:`ENGINE_CALLS`;
        ``ValueError`` from the backend on invalid ids; ``EngineDied`` when the engine died during this call or before
        it (a tensor-parallel rank's process ended): it names the process and this incarnation, and every later call
        and ping raises it too.
        """
        if self._died is not None:
            raise self._died
        try:
            return self._run(call)
        except EngineDied as exc:
            exc.incarnation = self.info.incarnation
            self._died = exc
            _log.error("model %s: replica pid %s: %s", self.config.name, os.getpid(), exc)
            raise

    def _run(self, call: EngineCall) -> CallResult:
        started = time.time()
        flat = [r for w in call.shards for r in w.requests]
        engine = ENGINE_CALLS.get(call.kind)
        if self.api and engine.api is not None:
            return self._run_api(call, engine, flat, started)
        by_key = {k: tuple(outs) for k, outs in _per_shard(call, engine.run(self, call, flat))}
        return CallResult(outputs=by_key, replica=self.info, started=started, seconds=round(time.time() - started, 4))

    def _run_api(self, call: EngineCall, engine: EngineKind, flat: list[Any], started: float) -> CallResult:
        """An API model's call: every request runs to its end; a shard with a failed request fails alone (its
        answered requests are in the run's answer cache), the others are returned; each shard's request counts."""
        outcomes = engine.api(self.backend, [r.user_text for r in flat], [r.assistant_prefix for r in flat], call)
        outputs: dict[str, tuple[Any, ...]] = {}
        failed: dict[str, BaseException] = {}
        counts: dict[str, RequestCounts] = {}
        for key, mine in _per_shard(call, outcomes):
            counts[key] = RequestCounts()
            for o in mine:
                counts[key].add(o.counts)
            try:
                outputs[key] = tuple(unwrap(mine))
            except Exception as exc:  # noqa: BLE001 - the backend's ApiRequestError: this shard fails, not the call
                failed[key] = exc
        return CallResult(outputs=outputs, replica=self.info, started=started,
                          seconds=round(time.time() - started, 4), failed=failed, requests=counts)

    def _prompts(self, requests: list[GenerateRequest]) -> list[list[int]]:
        return [self._prompt(r.user_text, r.assistant_prefix, self.config.generation_bos) for r in requests]

    def _prompt(self, user_text: str, assistant_prefix: str, add_bos: bool | None) -> list[int]:
        return render_prompt_ids(self.tokenizer, user_text, use_chat_template=self.config.chat_template,
                                 assistant_prefix=assistant_prefix, add_bos=add_bos,
                                 template_kwargs=self.config.template_kwargs())

    def generate(self, user_texts: list[str], max_new_tokens: int,
                 assistant_prefixes: list[str] | None = None,
                 sampling: Sampling | None = None) -> list[GenerationOutput] | list[SamplesOutput]:
        """Continuations of user turns (rendered with the chat template, or as plain text), each continuing its
        assistant prefix: greedy (one GenerationOutput per input) or ``sampling.n`` samples (one SamplesOutput)."""
        prefixes = assistant_prefixes or [""] * len(user_texts)
        if self.api:  # the server renders the chat template: text goes as messages
            return self.backend.generate(user_texts, prefixes, max_new_tokens, sampling)
        prompts = [self._prompt(t, p, self.config.generation_bos) for t, p in zip(user_texts, prefixes, strict=True)]

        def out(g, p):
            return GenerationOutput(text=g.text, finish_reason=g.finish_reason, n_tokens=len(g.token_ids),
                                    prompt_tokens=len(p))

        if sampling is None or sampling.greedy:
            gens = self.backend.generate(prompts, max_new_tokens=max_new_tokens) if prompts else []
            return [out(g, p) for g, p in zip(gens, prompts, strict=True)]
        used = self.model_sampling(sampling) if sampling.from_model else sampling
        samples = self.backend.generate_samples(
            prompts, n=used.n, max_new_tokens=max_new_tokens, temperature=used.temperature,
            top_p=used.top_p, top_k=used.top_k, seed=used.seed) if prompts else []
        return [SamplesOutput(samples=tuple(out(g, p) for g in ss), sampling=used)
                for ss, p in zip(samples, prompts, strict=True)]

    def model_sampling(self, sampling: Sampling) -> Sampling:
        """``sampling`` with temperature, top_p and top_k from the model's ``generation_config``.

        Raises ``ValueError`` if that configuration does not sample (``do_sample`` false or no temperature).
        """
        from transformers import GenerationConfig

        path = self.backend.model_name
        try:
            cfg = GenerationConfig.from_pretrained(path, revision=self.config.revision)
        except OSError:
            cfg = GenerationConfig()
        if not getattr(cfg, "do_sample", False) or not cfg.temperature:
            raise ValueError(f"temperature: model_default, but the generation_config of {self.config.model!r} does "
                             f"not sample (do_sample={getattr(cfg, 'do_sample', None)}, temperature={cfg.temperature})")
        return Sampling(temperature=float(cfg.temperature), top_p=float(cfg.top_p or 1.0), top_k=int(cfg.top_k or 0),
                        n=sampling.n, seed=sampling.seed)

    def next_token(self, requests: list[GenerateRequest], top_logprobs: int = 20, candidates: tuple[str, ...] = (),
                   cases: tuple[str, ...] = ()) -> list[NextTokenOutput]:
        """The top ``top_logprobs`` next tokens after each rendered prompt (and assistant prefix), raw log-probs in
        nats; ``candidates`` and their ``cases`` are looked up in this model's tokenizer once per set
        (protocols/candidates.py)."""
        if self.api:  # candidates are found among each row's returned token strings
            return self.backend.next_token([r.user_text for r in requests], [r.assistant_prefix for r in requests],
                                           top_logprobs, tuple(candidates), tuple(cases))
        prompts = self._prompts(requests)
        dists = self.backend.next_token(prompts, top_k=top_logprobs) if prompts else []
        cand: dict[str, dict[int, str]] = {}
        if candidates:
            key = (tuple(candidates), tuple(cases))
            if key not in self._candidate_ids:
                self._candidate_ids[key] = candidate_token_ids(self.tokenizer, candidates, cases)
            cand = self._candidate_ids[key]
        return [NextTokenOutput(token_ids=d.token_ids, logprobs=d.logprobs, prompt_tokens=len(p),
                                candidate_tokens=cand)
                for d, p in zip(dists, prompts, strict=True)]

    def hidden_states(self, requests: list[GenerateRequest],
                      layers: tuple[int, ...] | None = None) -> list[HiddenStatesOutput]:
        """The last prompt token's hidden states at ``layers`` (None: the embeddings and every layer).

        Raises ``NotImplementedError`` on the vLLM and openai backends (the message names a transformers entry).
        """
        self._refuse_api("hidden_states", "hidden states")
        prompts = self._prompts(requests)
        states = self.backend.hidden_states(prompts, layers=list(layers) if layers is not None else None) \
            if prompts else []
        n_states = states[0].shape[0] if states else 0
        idx = tuple(layers) if layers is not None else tuple(range(n_states))
        return [HiddenStatesOutput(states=h, layers=idx, prompt_tokens=len(p))
                for h, p in zip(states, prompts, strict=True)]

    def score(self, requests: list[ScoreRequest]) -> list[ScoreOutput]:
        """Forced-decoding log-probs of fixed answers.

        The context is the user turn rendered with the chat template, then ``assistant_prefix``; the answer is
        tokenized separately as ``separator + answer`` and the ids are joined (study 000 Appendix A). Raises
        ``NotImplementedError`` on the openai backend (chat completions return no prompt log-probs).
        """
        self._refuse_api("score", "forced scoring of a given answer (prompt log-probs)")

        pairs = []
        for r in requests:
            ctx = self._prompt(r.user_text, r.assistant_prefix, self.config.scoring_bos)
            pairs.append((ctx, answer_ids(self.tokenizer, r.answer,
                                          effective_separator(r.separator, self.config.chat_template))))
        scores = self.backend.score(pairs) if pairs else []
        return [ScoreOutput(logprobs=tuple(float(x) for x in s), answer_token_ids=tuple(int(t) for t in a),
                            context_tokens=len(c))
                for s, (c, a) in zip(scores, pairs, strict=True)]

    def _refuse_api(self, kind: str, what: str) -> None:
        if self.api:
            raise NotImplementedError(f"model {self.config.name!r} (backend openai): engine call {kind!r} needs "
                                      f"{what}, which chat completions do not offer; allowed for an API model: "
                                      "generate, next_token (the grid check refuses such grids before any work)")

    def request_stats(self) -> RequestCounts | None:
        """An API model: every request of this replica so far (actors/openai_backend.py); else None."""
        return self.backend.request_stats() if self.api else None


ModelActor = ray.remote(ModelWorker)


@dataclass(frozen=True)
class EngineKind:
    """One engine call a replica serves (``EngineCall.kind``; a stage names its own, flows/stages).

    ``run(worker, call, requests) -> outputs``: the requests of every shard of the call, flattened, through the
    worker's model; one output per request, in order. ``api(backend, user_texts, assistant_prefixes, call) ->
    outcomes``: the same on an API model, one outcome per request (a failed request fails its shard only); None: the
    worker's own method answers (it refuses what chat completions cannot do).
    """

    name: str
    run: Callable[[ModelWorker, EngineCall, list[Any]], list[Any]]
    api: Callable[[Any, list[str], list[str], EngineCall], list[Any]] | None = None


#: Every engine call of a replica, by name (duplicate name -> error; unknown -> error listing them).
ENGINE_CALLS: Registry[EngineKind] = Registry("engine call", value_type=EngineKind)
for _e in (
    EngineKind("generate", lambda w, c, rs: w.generate([r.user_text for r in rs], c.max_new_tokens,
                                                       [r.assistant_prefix for r in rs], sampling=c.sampling),
               api=lambda b, texts, prefixes, c: b.generate_outcomes(texts, prefixes, c.max_new_tokens, c.sampling)),
    EngineKind("score", lambda w, c, rs: w.score(rs)),
    EngineKind("next_token", lambda w, c, rs: w.next_token(rs, c.top_logprobs, c.candidates, c.cases),
               api=lambda b, texts, prefixes, c: b.next_token_outcomes(texts, prefixes, c.top_logprobs,
                                                                       tuple(c.candidates),
                                                                       tuple(c.cases))),
    EngineKind("hidden_states", lambda w, c, rs: w.hidden_states(rs, c.layers)),
):
    ENGINE_CALLS.register(_e.name, _e)


def _per_shard(call: EngineCall, outs: list[Any]) -> Iterator[tuple[str, list[Any]]]:
    """``(shard key, its outputs)`` of each shard of ``call``, cut from the outputs of its flattened requests."""
    i = 0
    for w in call.shards:
        yield w.key, outs[i : i + len(w.requests)]
        i += len(w.requests)

