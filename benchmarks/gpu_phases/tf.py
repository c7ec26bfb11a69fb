"""The ``tf`` phase of benchmarks/gpu_check.py: confgrid's transformers backend on the device. Scoring against the
same batches through the bare model, generation against raw ``model.generate``, each warmed and then timed
alternately (best of 2); the parity set in the main dtype and float32; a torch.profiler table of one call of each."""

from __future__ import annotations

import time
from pathlib import Path

from gpu_phases.common import _load_prompts, _rate, _tokens, gc_cuda


def phase_tf(ctx: dict) -> dict:
    import torch

    from confgrid.actors.transformers_backend import TransformersBackend

    size, smoke = ctx["size"], ctx["mode"] == "smoke"
    pr = _load_prompts(ctx)
    model_dir = str(Path(ctx["work"]) / "model")
    device = "cpu" if smoke else "cuda"
    main = size["main_dtype"]
    out: dict = {"backend": {"device": device, "score_batch_size": size["tf_batch"]}}

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    be = TransformersBackend(model_dir, dtype=main, device=device, batch_size=size["tf_batch"])
    out["backend"]["provenance"] = be.provenance()
    # scoring throughput: the backend against the same batches through the bare model (one forward, the answer
    # positions' log_softmax and gather, one copy to the host per batch). Both are warmed on the whole set once,
    # then timed alternately, best of 2: the first call of a shape pays CUDA's lazy kernel loading.
    pairs = pr["score_pairs"]
    be.score(pairs)
    _tf_raw_score(be, pairs, sync)
    sync()
    reps_c, reps_r = [], []
    for _ in range(2):
        t = time.perf_counter()
        scores = be.score(pairs)
        sync()
        reps_c.append(time.perf_counter() - t)
        reps_r.append(_tf_raw_score(be, pairs, sync))
    dt, dt_raw = min(reps_c), min(reps_r)
    tot, ans = _tokens(pairs)
    assert all(len(s) == len(a) for s, (_, a) in zip(scores, pairs, strict=True))
    out["score"] = {"path": "TransformersBackend.score", "dtype": main, "batch_size": size["tf_batch"],
                    "seconds": round(dt, 3), "seconds_each": [round(x, 3) for x in reps_c],
                    "raw_forward_seconds_each": [round(x, 3) for x in reps_r],
                    "tokens": tot, "answer_tokens": ans,
                    "tokens_per_s": _rate(tot, dt), "answer_tokens_per_s": _rate(ans, dt),
                    "raw_forward_tokens_per_s": _rate(tot, dt_raw),
                    "ratio_confgrid_over_raw_forward": round(dt_raw / dt, 4) if dt else None}
    # parity set
    parity = {"set": {"score_requests": len(pr["parity_pairs"]), "greedy_prompts": len(pr["parity_gen_ids"])}}
    parity[main] = _parity(be, pr, size["parity_new"])
    # generation: backend vs raw model.generate on the same batches, each warmed on the set, alternated, best of 2
    n, new = size["tf_gen_prompts"], size["tf_gen_new"]
    prompts = pr["gen_ids"][0][:n]
    be.batch_size = size["tf_gen_batch"]
    be.generate(prompts, max_new_tokens=4)
    _hf_raw_generate(be, prompts, 4, sync)
    sync()
    gen_c, gen_r = [], []
    for _ in range(2):
        t = time.perf_counter()
        gens = be.generate(prompts, max_new_tokens=new)
        sync()
        gen_c.append(time.perf_counter() - t)
        gen_r.append(_hf_raw_generate(be, prompts, new, sync))
    dt_c = min(gen_c)
    toks_c = sum(len(g.token_ids) for g in gens)
    dt_r, toks_r = min(gen_r)
    out["generate"] = {
        "path": "TransformersBackend.generate vs raw model.generate (same batches, min_new_tokens=max_new_tokens)",
        "dtype": main, "prompts": n, "max_new_tokens": new, "batch_size": size["tf_gen_batch"],
        "confgrid_tokens": toks_c, "confgrid_seconds": round(dt_c, 3), "confgrid_tokens_per_s": _rate(toks_c, dt_c),
        "confgrid_seconds_each": [round(x, 3) for x in gen_c],
        "raw_tokens": toks_r, "raw_seconds": round(dt_r, 3), "raw_tokens_per_s": _rate(toks_r, dt_r),
        "raw_seconds_each": [round(x[0], 3) for x in gen_r],
        "ratio_confgrid_over_raw": round((toks_c / dt_c) / (toks_r / dt_r), 4) if dt_c and dt_r and toks_r else None,
    }
    out["profile"] = _tf_profile(be, pairs[: size["tf_batch"] * 2], prompts[: size["tf_gen_batch"]], min(new, 16))
    del be
    gc_cuda(torch)
    if main != "float32":
        be32 = TransformersBackend(model_dir, dtype="float32", device=device, batch_size=size["tf_batch"])
        parity["float32"] = _parity(be32, pr, size["parity_new"])
        del be32
        gc_cuda(torch)
    out["parity"] = parity
    return out


def _parity(be, pr: dict, new: int) -> dict:
    lps = be.score(pr["parity_pairs"])
    gens = be.generate(pr["parity_gen_ids"], max_new_tokens=new)
    return {"logprobs": [[float(x) for x in s] for s in lps], "greedy": [list(g.token_ids) for g in gens]}


def _tf_raw_score(be, pairs: list[tuple[list[int], list[int]]], sync) -> float:
    """Seconds to score ``pairs`` through the bare model: the backend's batches (sorted by length, right padding),
    one forward each, ``log_softmax`` of the answer positions in float32, one gather and one host copy per batch."""
    import torch

    model, pad = be.model, be.pad_token_id
    lengths = [len(c) + len(a) for c, a in pairs]
    sync()
    t = time.perf_counter()
    with torch.inference_mode():
        for batch in be._batches(lengths):
            width = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            rows, cols, targets = [], [], []
            for r, i in enumerate(batch):
                ctx, ans = pairs[i]
                ids[r, : lengths[i]] = torch.tensor(list(ctx) + list(ans))
                mask[r, : lengths[i]] = 1
                rows += [r] * len(ans)
                cols += range(len(ctx) - 1, len(ctx) + len(ans) - 1)
                targets += list(ans)
            logits = model(input_ids=ids.to(be.device), attention_mask=mask.to(be.device)).logits
            picked = logits[torch.tensor(rows, device=be.device), torch.tensor(cols, device=be.device)].float()
            lp = torch.log_softmax(picked, dim=-1).gather(-1, torch.tensor(targets, device=be.device)[:, None])
            lp.cpu()
    sync()
    return time.perf_counter() - t


def _tf_profile(be, pairs, prompts, new: int) -> dict:
    """torch.profiler over one scoring call and one generation call of the backend: the 12 operators with the
    most self device time and the 12 with the most self host time (milliseconds), so a slow path names its cause."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    res: dict = {}
    for name, call in (("score", lambda: be.score(pairs)),
                       ("generate", lambda: be.generate(prompts, max_new_tokens=new))):
        with profile(activities=acts) as prof:
            t = time.perf_counter()
            call()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            wall = time.perf_counter() - t
        ev = prof.key_averages()
        dev = lambda e: getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))  # noqa: E731

        def top(key):
            return [{"op": e.key, "calls": e.count, "self_ms": round(key(e) / 1e3, 3)}
                    for e in sorted(ev, key=key, reverse=True)[:12] if key(e) > 0]

        res[name] = {"wall_ms": round(wall * 1e3, 1), "requests": len(pairs) if name == "score" else len(prompts),
                     "device_self_total_ms": round(sum(dev(e) for e in ev) / 1e3, 1),
                     "top_device": top(dev), "top_host": top(lambda e: e.self_cpu_time_total)}
    return res


def _hf_raw_generate(be, prompts: list[list[int]], new: int, sync) -> tuple[float, int]:
    """Plain ``model.generate`` on the backend's model, batches as the backend cuts them, left padding."""
    import torch

    model, pad = be.model, be.pad_token_id
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batches = [order[k : k + be.batch_size] for k in range(0, len(order), be.batch_size)]
    tokens = 0
    sync()
    t = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            width = max(len(prompts[i]) for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                ids[r, width - len(prompts[i]) :] = torch.tensor(prompts[i])
                mask[r, width - len(prompts[i]) :] = 1
            seqs = model.generate(input_ids=ids.to(be.device), attention_mask=mask.to(be.device), do_sample=False,
                                  max_new_tokens=new, min_new_tokens=new, pad_token_id=pad,
                                  temperature=None, top_p=None, top_k=None)
            tokens += int(seqs[:, width:].numel())
    sync()
    return time.perf_counter() - t, tokens
