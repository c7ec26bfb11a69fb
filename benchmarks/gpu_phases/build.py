"""The build phase of benchmarks/gpu_check.py: a random Llama-architecture model with a byte-level BPE tokenizer of
exactly its vocabulary, saved with ``save_pretrained``; the prompts and scoring requests of every phase; on a GPU,
the bf16 matmul ceiling (see gpu_check.py's docstring for the sizes)."""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

from gpu_phases.common import REPO


def _corpus(rng: random.Random, n_lines: int, words_per_line: int = 64):
    """Pseudo-word text: a Zipf-weighted pool of syllable words (enough distinct pairs for a 32k BPE)."""
    cons = "b c d f g h j k l m n p r s t v w z ch sh th br st tr".split()
    vows = "a e i o u ai ea ou io".split()

    def word() -> str:
        return "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.randint(1, 4)))

    pool = list(dict.fromkeys(word() for _ in range(80000 if n_lines > 2000 else 6000)))
    cum, acc = [], 0.0
    for i in range(len(pool)):
        acc += 1.0 / (i + 10)
        cum.append(acc)

    def words(k: int) -> str:
        return " ".join(rng.choices(pool, cum_weights=cum, k=k))

    return [words(words_per_line) for _ in range(n_lines)], words


def phase_build(ctx: dict) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import sys

    sys.path.insert(0, str(REPO))  # tools/ (not installed)
    from tools.fixture import SPECIAL_TOKENS, build_tokenizer

    try:
        from confgrid.protocols.chat import answer_ids, effective_separator, render_prompt_ids
        render_source = "confgrid.protocols.chat"
    except ImportError as exc:  # e.g. pyarrow missing: the same plain-text rule, inline
        render_source = f"inline copy of the plain-text rule (confgrid.protocols.chat: {exc})"

        def render_prompt_ids(tok, text, use_chat_template=False):
            return list(tok(text, add_special_tokens=False)["input_ids"])

        def answer_ids(tok, answer, sep):
            return list(tok(sep + answer, add_special_tokens=False)["input_ids"])

        def effective_separator(sep, use_chat_template):
            return " " if (not use_chat_template and sep == "") else sep

    size, smoke = ctx["size"], ctx["mode"] == "smoke"
    m = size["model"]
    t0 = time.perf_counter()
    cuda = torch.cuda.is_available() and not smoke
    if not smoke and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch; run with --cpu-smoke on a machine without a GPU")
    gpu: dict = {"cuda_available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu.update(name=torch.cuda.get_device_name(0), count=torch.cuda.device_count(),
                   memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
                   capability=".".join(map(str, torch.cuda.get_device_capability(0))))
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            gpu["nvidia_smi"] = q.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    if cuda:
        gpu["matmul_bf16_tflops"] = _matmul_tflops(torch)

    rng = random.Random(0)
    texts, words = _corpus(rng, size["corpus_lines"])
    tok = build_tokenizer(texts, vocab_size=m["vocab"])
    trained = len(tok)
    if len(tok) < m["vocab"]:  # BPE ran out of pairs: fill with plain added tokens
        tok.add_tokens([f"<|fill{i}|>" for i in range(m["vocab"] - len(tok))])
    if len(tok) != m["vocab"]:
        raise RuntimeError(f"tokenizer has {len(tok)} tokens, wanted {m['vocab']}")
    t_tok = time.perf_counter() - t0

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["intermediate"],
        num_hidden_layers=m["layers"], num_attention_heads=m["heads"], num_key_value_heads=m["kv_heads"],
        head_dim=m["hidden"] // m["heads"], max_position_embeddings=m["max_pos"], tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16 if cuda else torch.float32)
    try:
        with torch.device("cuda" if cuda else "cpu"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    lm_std = 4.0 / m["hidden"] ** 0.5  # logits ~ N(0, 4^2): few near-ties for greedy decoding
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, lm_std)
        special = [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
        model.lm_head.weight[special] = 0.0  # logit exactly 0: greedy never picks EOS (see module doc)
    model = model.to(torch.bfloat16).eval()
    model.generation_config.bos_token_id = tok.bos_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.do_sample = False
    params_total = sum(p.numel() for p in model.parameters())
    params_embed = model.model.embed_tokens.weight.numel()
    model_dir = Path(ctx["work"]) / "model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    del model
    if cuda:
        torch.cuda.empty_cache()

    def ids(text: str) -> list[int]:
        return render_prompt_ids(tok, text, use_chat_template=False)

    sep = effective_separator(" ", False)

    def pairs(n: int, cw: int, aw: int) -> tuple[list, list]:
        txt = [(words(cw), words(aw)) for _ in range(n)]
        return txt, [(ids(c), answer_ids(tok, a, sep)) for c, a in txt]

    gen_texts = [[words(size["gen_words"]) for _ in range(size["gen_prompts"])] for _ in range(size["gen_sets"])]
    gen_ids = [[ids(t) for t in s] for s in gen_texts]
    score_texts, score_pairs = pairs(size["score_requests"], size["score_ctx_words"], size["score_ans_words"])
    par_texts, par_pairs = pairs(size["parity_requests"], size["parity_ctx_words"], size["parity_ans_words"])
    pg_texts = [words(size["parity_gen_words"]) for _ in range(size["parity_gen"])]
    pg_ids = [ids(t) for t in pg_texts]
    warm_texts = [words(size["gen_words"]) for _ in range(16)]
    prompts = {
        "gen_texts": gen_texts, "gen_ids": gen_ids, "score_texts": score_texts, "score_pairs": score_pairs,
        "parity_texts": par_texts, "parity_pairs": par_pairs, "parity_gen_texts": pg_texts,
        "parity_gen_ids": pg_ids, "warm_texts": warm_texts, "warm_ids": [ids(t) for t in warm_texts],
        "separator": sep,
    }
    (Path(ctx["work"]) / "prompts.json").write_text(json.dumps(prompts))
    mean = lambda xs: round(sum(xs) / max(1, len(xs)), 1)  # noqa: E731
    return {
        "gpu": gpu,
        "model": {
            "dir": str(model_dir), "architecture": "LlamaForCausalLM (random init)", **m,
            "head_dim": m["hidden"] // m["heads"], "tie_word_embeddings": False, "saved_dtype": "bfloat16",
            "params_total": params_total, "params_matmul": params_total - params_embed,
            "params_total_billions": round(params_total / 1e9, 3),
            "lm_head_init_std": round(lm_std, 5), "special_token_lm_head_rows": "zero (greedy never emits EOS)",
        },
        "tokenizer": {"kind": "byte-level BPE, tools.fixture.build_tokenizer on generated pseudo-words",
                      "trained_vocab": trained, "vocab": len(tok), "train_s": round(t_tok, 1)},
        "workload": {
            "generation": {"prompts_per_rep": size["gen_prompts"], "reps": size["gen_sets"],
                           "distinct_prompt_set_per_rep": True, "max_new_tokens": size["gen_new"],
                           "mean_prompt_tokens": mean([len(p) for s in gen_ids for p in s])},
            "scoring": {"requests": len(score_pairs),
                        "mean_context_tokens": mean([len(c) for c, _ in score_pairs]),
                        "mean_answer_tokens": mean([len(a) for _, a in score_pairs])},
            "parity": {"score_requests": len(par_pairs), "greedy_prompts": len(pg_ids),
                       "greedy_new_tokens": size["parity_new"]},
            "main_dtype": size["main_dtype"],
            "prompt_rendering": render_source + " (plain text, no chat template; the same ids go to every backend)",
        },
        "build_s": round(time.perf_counter() - t0, 1),
    }


def _matmul_tflops(torch) -> float:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    del a, b
    torch.cuda.empty_cache()
    return round(2 * n**3 / times[len(times) // 2] / 1e12, 1)
