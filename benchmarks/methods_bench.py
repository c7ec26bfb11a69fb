"""Benchmark of the sampling and next-token paths (issue 9), on the CPU transformers backend.

Not a test. The bundled fixture model (1.1M parameters, one torch thread) on
``--items`` bundled TriviaQA questions rendered with the confidence prompt:

* samples per second for k = 10 samples per question, drawn by ONE call with
  ``n=10`` (the 10 samples are 10 rows of the same batches) against TEN calls
  with ``n=1`` and seeds 0..9 (what a loop over samples does); target >= 2x;
* next-token throughput: questions per second of ``next_token`` (one forward
  pass per batch, top-20 log-probs), against greedy generation of one token.

Usage::

    .venv/bin/python benchmarks/methods_bench.py [--items 64] [--k 10] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=64)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from confgrid.actors.named_models import FIXTURE_MODEL_DIR
    from confgrid.actors.transformers_backend import TransformersBackend
    from confgrid.protocols.chat import render_prompt_ids
    from confgrid.protocols.datasets import BUNDLED, load_items
    from confgrid.protocols.prompts import get_prompt

    be = TransformersBackend(str(FIXTURE_MODEL_DIR), dtype="float32", device="cpu", batch_size=64)
    items = load_items("triviaqa", BUNDLED["triviaqa"], limit=args.items, seed=0)
    prompts = [render_prompt_ids(be.tokenizer, get_prompt("confidence").render(i.question), use_chat_template=True)
               for i in items]
    print(f"fixture model, {len(prompts)} questions, k={args.k}, max_new_tokens={args.max_new_tokens}, 1 thread; "
          f"load average {os.getloadavg()[0]:.2f}")

    def best(fn):
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    one = best(lambda: be.generate_samples(prompts, n=args.k, max_new_tokens=args.max_new_tokens, seed=0))
    ten = best(lambda: [be.generate_samples(prompts, n=1, max_new_tokens=args.max_new_tokens, seed=s)
                        for s in range(args.k)])
    n = len(prompts) * args.k
    print(f"one call, n={args.k}:   {one:6.2f} s  {n / one:7.1f} samples/s")
    print(f"{args.k} calls, n=1:     {ten:6.2f} s  {n / ten:7.1f} samples/s")
    ratio = ten / one
    print(f"ratio {ratio:.2f}x (target >= 2x: {'MET' if ratio >= 2 else 'NOT MET'})")
    nt = best(lambda: be.next_token(prompts, top_k=20))
    g1 = best(lambda: be.generate(prompts, max_new_tokens=1))
    print(f"next_token (top 20): {nt:6.2f} s  {len(prompts) / nt:7.1f} questions/s; "
          f"greedy 1 token: {g1:6.2f} s  {len(prompts) / g1:7.1f} questions/s")


if __name__ == "__main__":
    main()
