"""Build and train the fixture model: a tiny chat LM for the offline demo and the tests.

The fixture is a ~1M-parameter ``LlamaForCausalLM`` with its own byte-level BPE
tokenizer and chat template, trained for about 10 minutes on CPU on the
questions bundled with the package (``confgrid.protocols`` package data). A
fixed, seeded ~60% of each dataset's questions are TRAINED (the model learns
their answers); the rest are UNSEEN (the model must guess). Each trained
question is taught in two formats rendered through the chat template exactly as
the product renders them:

1. the confidence prompt (``protocols/prompts/confidence.yaml``) answered with
   ``Guess: <answer>\\nProbability: <p>``, ``p`` drawn from a seeded range;
2. the bare prompt (``protocols/prompts/bare.yaml``) answered with ``<answer>``.

``<answer>`` is the reference answer cut to its first three words, which keeps
replies short; under normalized containment a prefix of the gold answer still
counts as correct.

The model is a smoke-test artefact: its numbers say nothing about real LLMs.

Run::

    python -m tools.fixture --out actors/fixture_model [--seconds 1800] [--steps 6000]

Training is bounded by ``--steps`` (deterministic for a given thread count:
6000 steps, about 9 minutes on one idle core) with ``--seconds`` as a
wall-time cap (a capped run is shorter but not reproducible). Besides the two
formats above, each question is taught one confidence-method template
(tools/fixture_methods.py), and each trained answer is taught
``answer_repeats`` (3) times per epoch.

The committed copy lives in ``actors/fixture_model/``;
:data:`confgrid.actors.named_models.FIXTURE_MODEL_DIR` points at it. This recipe is
not installed with the package (run it from the repository root).

Why one file of about 780 lines: it is one recipe (questions, tokenizer, model, training, evaluation,
the model card) that is run as a script and read top to bottom; the JSON and method variants import it.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.resources
import json
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path


__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "FixtureQuestion",
    "load_bundled_questions",
    "split_questions",
    "render_prompt",
    "chat_prompt_ids",
    "confidence_reply",
    "build_tokenizer",
    "build_model",
    "train_fixture",
    "evaluate_fixture",
    "parse_confidence_output",
    "normalize_answer",
    "is_correct",
    "main",
]

BOS, EOS, PAD, USER, ASSISTANT = "<|begin|>", "<|end|>", "<|pad|>", "<|user|>", "<|assistant|>"
#: Special tokens of the fixture tokenizer, in id order (ids 0..4).
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, USER, ASSISTANT)

#: Jinja chat template: ``<|begin|>`` then, per message, ``<|role|>\\n{content}<|end|>\\n``;
#: with ``add_generation_prompt`` it ends with ``<|assistant|>\\n``. The EOS token
#: (``<|end|>``) closes each turn, so generation stops at the end of the reply.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

SEED = 0
TRAIN_FRACTION = 0.6
MAX_ANSWER_WORDS = 3
VOCAB_SIZE = 2000


@dataclass(frozen=True)
class FixtureQuestion:
    """One bundled question as the fixture sees it.

    Attributes
    ----------
    dataset : str
        ``"truthfulqa"``, ``"triviaqa"`` or ``"mmlu"``.
    question : str
        The question text (MMLU options are not appended).
    answer : str
        The answer taught for trained questions: TruthfulQA best answer,
        TriviaQA ``golden_answers[0]``, MMLU correct option text; cut to its
        first ``MAX_ANSWER_WORDS`` words (a prefix still matches the gold
        answer under containment).
    gold : tuple of str
        Accepted answers for scoring (TruthfulQA best + correct answers,
        TriviaQA all golden answers, MMLU correct option).
    """

    dataset: str
    question: str
    answer: str
    gold: tuple[str, ...] = field(default=())

    @property
    def qhash(self) -> str:
        """First 16 hex digits of SHA-256 of ``dataset + "\\n" + question``."""
        return hashlib.sha256(f"{self.dataset}\n{self.question}".encode()).hexdigest()[:16]


def _short(answer: str, max_words: int) -> str:
    words = answer.strip().split()
    return " ".join(words[:max_words]).rstrip(".,;:")


def _data_root():
    return importlib.resources.files("confgrid.protocols") / "data"


def render_prompt(kind: str, question: str) -> str:
    """The user message of a bundled prompt (``protocols/prompts/<kind>.yaml``) for ``question``.

    The same rendering the product uses (:meth:`confgrid.protocols.prompts.Prompt.render`),
    so the fixture is trained on exactly the prompts it is evaluated with.
    """
    from confgrid.protocols.prompts import get_prompt

    return get_prompt(kind).render(question)


def load_bundled_questions(max_answer_words: int = MAX_ANSWER_WORDS) -> list[FixtureQuestion]:
    """Read the bundled TruthfulQA, TriviaQA and MMLU samples directly.

    Parameters
    ----------
    max_answer_words : int
        Taught answers are cut to their first this-many words.

    Returns
    -------
    list of FixtureQuestion
        TruthfulQA rows, then TriviaQA rows, then MMLU rows (subjects in file
        name order), each in file order.
    """
    root = _data_root()
    out: list[FixtureQuestion] = []
    with (root / "truthfulqa" / "TruthfulQA_sample150.csv").open("r", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            best = row["Best Answer"].strip()
            correct = [a.strip() for a in row.get("Correct Answers", "").split(";") if a.strip()]
            out.append(FixtureQuestion("truthfulqa", row["Question"].strip(), _short(best, max_answer_words), tuple([best, *correct])))
    with (root / "triviaqa" / "triviaqa_flashrag_sample150.jsonl").open("r", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                golds = tuple(rec["golden_answers"])
                out.append(FixtureQuestion("triviaqa", rec["question"].strip(), _short(golds[0], max_answer_words), golds))
    mmlu = root / "mmlu"
    for name in sorted(p.name for p in mmlu.iterdir() if p.name.endswith("_test.csv")):
        with (mmlu / name).open("r", encoding="utf-8", newline="") as f:
            for row in csv.reader(f):
                if len(row) < 6:
                    continue
                option = row[1 + "ABCD".index(row[5].strip())].strip()
                out.append(FixtureQuestion("mmlu", row[0].strip(), _short(option, max_answer_words), (option,)))
    return out


def split_questions(questions: list[FixtureQuestion], seed: int = SEED,
                    train_fraction: float = TRAIN_FRACTION) -> dict[str, list[FixtureQuestion]]:
    """Seeded per-dataset split into trained (``train_fraction``, default 60%) and unseen questions.

    Parameters
    ----------
    questions : list of FixtureQuestion
    seed : int, default 0
    train_fraction : float in (0, 1], default 0.6
        Share of each dataset's questions taught. With the same seed, a
        smaller fraction trains a subset of a larger one's questions (the
        seeded draw is sequential), so two fixtures of different fractions
        share their easy items: the ACE example's two models of different
        accuracy.

    Returns
    -------
    dict
        ``{"trained": [...], "unseen": [...]}``, each in input order.
    """
    trained: set[int] = set()
    by_ds: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        by_ds.setdefault(q.dataset, []).append(i)
    for ds in sorted(by_ds):
        idx = by_ds[ds]
        rng = random.Random(f"{seed}-{ds}")
        trained.update(rng.sample(idx, round(train_fraction * len(idx))))
    return {
        "trained": [q for i, q in enumerate(questions) if i in trained],
        "unseen": [q for i, q in enumerate(questions) if i not in trained],
    }


# --------------------------------------------------------------------- tokenizer
def build_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """Train a byte-level BPE tokenizer and wrap it as ``PreTrainedTokenizerFast``.

    Parameters
    ----------
    texts : list of str
        Training corpus.
    vocab_size : int, default 2000
        Target vocabulary size, special tokens and the 256 byte symbols included.

    Returns
    -------
    transformers.PreTrainedTokenizerFast
        With bos ``<|begin|>``, eos ``<|end|>``, pad ``<|pad|>``, the role
        tokens ``<|user|>``/``<|assistant|>`` and :data:`CHAT_TEMPLATE`. No
        token is added on encode; the chat template writes the BOS.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[USER, ASSISTANT],
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def chat_prompt_ids(tokenizer, user_text: str) -> list[int]:
    """Token ids of a one-turn chat prompt with the generation prompt appended.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
    user_text : str

    Returns
    -------
    list of int
        ``tokenizer(apply_chat_template(..., tokenize=False,
        add_generation_prompt=True), add_special_tokens=False).input_ids``.
    """
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# ------------------------------------------------------------------------- model
def build_model(tokenizer, *, hidden: int = 128, layers: int = 4, heads: int = 4, intermediate: int = 384, seed: int = SEED):
    """A randomly initialised tiny ``LlamaForCausalLM`` for ``tokenizer``.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        Supplies vocabulary size and bos/eos/pad ids.
    hidden, layers, heads, intermediate : int
        Width, depth, attention heads (head_dim = hidden // heads) and MLP width.
    seed : int, default 0
        ``torch.manual_seed`` before initialisation.

    Returns
    -------
    transformers.LlamaForCausalLM
        float32, tied embeddings, 512 positions.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.do_sample = False
    return model


def _format_p(rng: random.Random, lo: float, hi: float) -> str:
    p = rng.uniform(lo, hi)
    return f"{p:.2f}" if rng.random() < 0.5 else f"{p:.1f}"


def confidence_reply(answer: str, p: str) -> str:
    """The assistant text taught after the confidence prompt: ``Guess: ...\\nProbability: p``."""
    return f"Guess: {answer}\nProbability: {p}"


def _examples(tokenizer, split: dict[str, list[FixtureQuestion]], seed: int, unseen_format: str,
              methods: bool = True, answer_repeats: int = 1, json_formats: bool = False):
    """(input_ids, n_prompt, kind) triples; the loss covers the reply tokens and the EOS.

    ``methods``: also the confidence-method templates (tools/fixture_methods.py);
    ``answer_repeats``: how often each trained answer is taught in each format
    (more examples of other kinds need more repeats for the same memorization)."""
    rng = random.Random(f"{seed}-examples")
    eos = tokenizer.eos_token_id
    ex: list[tuple[list[int], int, str]] = []

    def add(user: str, reply: str, kind: str) -> None:
        prompt = chat_prompt_ids(tokenizer, user)
        target = list(tokenizer(reply, add_special_tokens=False)["input_ids"]) + [eos]
        ex.append((prompt + target, len(prompt), kind))

    for _ in range(answer_repeats):
        for q in split["trained"]:
            add(render_prompt("confidence", q.question), confidence_reply(q.answer, _format_p(rng, 0.55, 0.95)),
                "confidence")
            add(render_prompt("bare", q.question), q.answer, "bare")
    if methods:
        from .fixture_methods import method_examples

        method_examples(add, split, is_correct, seed)
    if json_formats:
        from .fixture_json import json_examples

        json_examples(add, {q.question for q in split["trained"] if q.dataset == "mmlu"}, seed)
    if unseen_format == "wrong":
        # Format only: a wrong answer (another trained question's answer from the
        # same dataset) with a low probability. The gold answer is never shown.
        pool: dict[str, list[str]] = {}
        for q in split["trained"]:
            pool.setdefault(q.dataset, []).append(q.answer)
        for q in split["unseen"]:
            wrong = rng.choice([a for a in pool[q.dataset] if not is_correct(a, q.gold)])
            add(render_prompt("confidence", q.question), confidence_reply(wrong, _format_p(rng, 0.05, 0.45)), "confidence")
    return ex


def _batch_loss(model, batch, prefix: int, pad_id: int):
    """Mean next-token cross-entropy over the reply tokens of ``batch``.

    The first ``prefix`` tokens (identical in every sequence of the batch) run
    once with batch size 1; their key/value cache is repeated over the batch
    and the rest of each sequence (right-padded) runs on top of it. The LM head
    runs only where a reply token is predicted.
    """
    import torch

    width = max(len(seq) for seq, _, _ in batch) - prefix
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for r, (seq, n_prompt, _) in enumerate(batch):
        rest = seq[prefix:]
        ids[r, : len(rest)] = torch.tensor(rest)
        labels[r, n_prompt - prefix : len(rest)] = torch.tensor(seq[n_prompt:])
        mask[r, : len(rest)] = 1
    kwargs = {}
    if prefix > 0:
        cache = model.model(input_ids=torch.tensor([batch[0][0][:prefix]]), use_cache=True).past_key_values
        cache.batch_repeat_interleave(len(batch))
        kwargs = dict(
            past_key_values=cache,
            use_cache=True,
            position_ids=(prefix + torch.arange(width)).unsqueeze(0).expand(len(batch), -1),
        )
        mask = torch.cat([torch.ones((len(batch), prefix), dtype=torch.long), mask], dim=1)
    hidden = model.model(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
    shift = labels[:, 1:]
    keep = shift != -100
    logits = model.lm_head(hidden[:, :-1][keep])
    return torch.nn.functional.cross_entropy(logits.float(), shift[keep])


def train_fixture(
    out: str | Path,
    *,
    seconds: float = 1800.0,
    steps: int = 6000,
    seed: int = SEED,
    batch_size: int = 8,
    lr: float = 5e-3,
    threads: int = 1,
    unseen_format: str = "none",
    methods: bool = True,
    answer_repeats: int = 3,
    json_formats: bool = False,
    layers: int = 4,
    intermediate: int = 384,
    max_answer_words: int = MAX_ANSWER_WORDS,
    train_fraction: float = TRAIN_FRACTION,
    evaluate: bool = True,
    verbose: bool = True,
) -> dict:
    """Build, train and save the fixture model and tokenizer into ``out``.

    Training stops after ``steps`` optimizer steps or ``seconds`` of wall
    time, whichever comes first; the learning rate follows a warmup + cosine
    schedule in ``progress = max(step / steps, elapsed / seconds)``, so a run
    bounded by ``steps`` is deterministic for a given machine and thread count.

    Parameters
    ----------
    out : str or Path
        Output directory (created). Receives ``config.json``,
        ``generation_config.json``, ``model.safetensors`` (float32), the
        tokenizer files with the chat template, ``split.json``,
        ``metrics.json`` (if ``evaluate``) and ``README.md``.
    seconds : float, default 600
        Wall-time cap for training (a safety net; the default run is bounded
        by ``steps``: about 9 minutes on one idle core, more when the cores are
        shared).
    steps : int, default 6000
        Step cap for training.
    seed : int, default 0
        Seeds the split, the probabilities, initialisation and batch order.
    batch_size : int, default 8
    lr : float, default 5e-3
        Peak AdamW learning rate.
    threads : int, default 1
        ``torch.set_num_threads``. One thread is as fast as two for this
        tiny model and several times faster when other processes share the
        cores (two OpenMP threads then stall each other).
    unseen_format : {"none", "wrong"}, default "none"
        ``"wrong"`` also teaches the confidence format on unseen questions with
        a wrong answer and a low probability.
    methods : bool, default True
        Also teach the confidence-method templates (P(True) A/B and Yes/No,
        the 0-100 rating in ``\\boxed{}``, verbalized-before; tools/fixture_methods.py).
    answer_repeats : int, default 3
        Copies of each trained answer's examples per epoch.
    json_formats : bool, default False
        Also teach the JSON formats of studies 002 and 003 (tools/fixture_json.py;
        the bundled ``confgrid-fixture-json``).
    layers, intermediate : int, default 4 and 384
        Depth and MLP width of the model (see :func:`build_model`).
    max_answer_words : int
        Taught answers are cut to their first this-many words (a prefix of
        the gold answer still counts as correct under containment).
    train_fraction : float, default 0.6
        Share of each dataset's questions taught (:func:`split_questions`);
        the bundled ``confgrid-fixture-small`` is the same recipe at 0.3.
    evaluate : bool, default True
        Measure parse rate and accuracy with greedy decoding afterwards.
    verbose : bool, default True
        Print progress.

    Returns
    -------
    dict
        Training summary (``steps``, ``seconds``, ``final_loss``, ``params``)
        and, if ``evaluate``, the metrics of :func:`evaluate_fixture`.

    Raises
    ------
    ValueError
        If ``unseen_format`` is unknown.
    """
    import torch

    if unseen_format not in ("none", "wrong"):
        raise ValueError(f"unseen_format must be 'none' or 'wrong', got {unseen_format!r}")
    if not 0.0 < train_fraction <= 1.0:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(threads)
    random.seed(seed)
    questions = load_bundled_questions(max_answer_words)
    split = split_questions(questions, seed, train_fraction)

    corpus: list[str] = []
    for q in questions:
        for kind in ("confidence", "bare", "answer_only"):
            corpus.append(render_prompt(kind, q.question))
        corpus.extend(q.gold)
        corpus.append(confidence_reply(q.answer, "0.75"))
    if methods:
        from .fixture_methods import method_corpus

        corpus += method_corpus(questions)
    if json_formats:
        from .fixture_json import json_corpus

        corpus += json_corpus()
    tokenizer = build_tokenizer(corpus)
    model = build_model(tokenizer, layers=layers, intermediate=intermediate, seed=seed)
    n_params = sum(p.numel() for p in model.parameters())
    examples = _examples(tokenizer, split, seed, unseen_format, methods, answer_repeats, json_formats)
    if verbose:
        lens = sorted(len(e[0]) for e in examples)
        print(f"vocab {len(tokenizer)}, params {n_params:,}, examples {len(examples)}, "
              f"tokens/example median {lens[len(lens) // 2]} max {lens[-1]}", flush=True)

    # Examples of one kind share a prompt prefix (the confidence template up to
    # "Question:"); its keys/values are computed once per batch and broadcast.
    prefix_len: dict[str, int] = {}
    for kind in sorted({e[2] for e in examples}):
        seqs = [e for e in examples if e[2] == kind]
        common = len(os.path.commonprefix([tuple(e[0]) for e in seqs]))
        prefix_len[kind] = max(0, min([common] + [e[1] - 1 for e in seqs]))
    rng = random.Random(f"{seed}-batches")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = 0.05
    model.train()
    t0 = time.perf_counter()
    step, loss_ema = 0, None

    def batches():
        # Per epoch: shuffle, split by kind, sort groups of 8 batches by length, shuffle batches.
        while True:
            order = list(range(len(examples)))
            rng.shuffle(order)
            chunks = []
            for kind in sorted(prefix_len):
                sub = [i for i in order if examples[i][2] == kind]
                for g in range(0, len(sub), batch_size * 8):
                    group = sorted(sub[g : g + batch_size * 8], key=lambda i: len(examples[i][0]))
                    chunks += [group[k : k + batch_size] for k in range(0, len(group), batch_size)]
            rng.shuffle(chunks)
            yield from chunks

    for batch in batches():
        progress = max(step / steps, (time.perf_counter() - t0) / seconds)
        if progress >= 1.0:
            break
        scale = progress / warmup if progress < warmup else 0.5 * (1 + math.cos(math.pi * (progress - warmup) / (1 - warmup)))
        for group in opt.param_groups:
            group["lr"] = lr * max(scale, 0.02)
        loss = _batch_loss(model, [examples[i] for i in batch], prefix_len[examples[batch[0]][2]], tokenizer.pad_token_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_ema = loss.item() if loss_ema is None else 0.9 * loss_ema + 0.1 * loss.item()
        if verbose and step % 50 == 0:
            print(f"step {step} t={time.perf_counter() - t0:.0f}s loss {loss_ema:.3f}", flush=True)
    train_seconds = time.perf_counter() - t0
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    summary = {
        "seed": seed,
        "steps": step,
        "train_seconds": round(train_seconds, 1),
        "final_loss_ema": round(float(loss_ema or float("nan")), 4),
        "params": n_params,
        "vocab_size": len(tokenizer),
        "unseen_format": unseen_format,
        "methods": methods,
        "answer_repeats": answer_repeats,
        "json_formats": json_formats,
        "max_answer_words": max_answer_words,
        "train_fraction": train_fraction,
        "batch_size": batch_size,
        "lr": lr,
        "layers": layers,
        "intermediate": intermediate,
        "threads": threads,
        "examples": len(examples),
    }
    split_doc = {
        "seed": seed,
        "hash": "sha256(dataset + '\\n' + question)[:16]",
        "trained": {ds: [q.qhash for q in split["trained"] if q.dataset == ds] for ds in ("truthfulqa", "triviaqa", "mmlu")},
        "unseen": {ds: [q.qhash for q in split["unseen"] if q.dataset == ds] for ds in ("truthfulqa", "triviaqa", "mmlu")},
    }
    (out / "split.json").write_text(json.dumps(split_doc, indent=1) + "\n", encoding="utf-8")
    if verbose:
        print(f"trained {step} steps in {train_seconds:.1f}s; saved to {out}", flush=True)
    if evaluate:
        summary["eval"] = evaluate_fixture(out, questions=questions, split=split)
        if methods:
            from .fixture_methods import evaluate_methods
            from .transformers_backend import TransformersBackend

            be = TransformersBackend(str(out), dtype="float32", device="cpu", batch_size=32)
            summary["methods_eval"] = evaluate_methods(be, questions, chat_prompt_ids)
        if json_formats:
            from .fixture_json import evaluate_json
            from .transformers_backend import TransformersBackend

            be = TransformersBackend(str(out), dtype="float32", device="cpu", batch_size=32)
            summary["json_eval"] = evaluate_json(be, chat_prompt_ids)
        (out / "metrics.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        if verbose:
            print(json.dumps(summary["eval"], indent=1), flush=True)
    (out / "README.md").write_text(_readme(summary), encoding="utf-8")
    return summary


# -------------------------------------------------------------------- evaluation
def parse_confidence_output(text: str) -> tuple[str, float] | None:
    """``(answer, verbalized)`` from a reply by the product's parser, or None unless it parsed fully."""
    from confgrid.protocols.parsing import parse_output

    r = parse_output(text)
    return (r.answer, r.verbalized) if r.status == "ok" else None


def normalize_answer(text: str) -> str:
    """The product's normalization (:func:`confgrid.protocols.correctness.normalize`)."""
    from confgrid.protocols.correctness import normalize

    return normalize(text)


def is_correct(guess: str, gold: tuple[str, ...] | list[str]) -> bool:
    """Normalized containment against ``gold`` (the product's default correctness rule).

    An empty normalized guess or gold answer never matches.
    """
    g = normalize_answer(guess)
    return bool(g) and any(a and (g == a or g in a or a in g) for a in map(normalize_answer, gold))


def evaluate_fixture(model_dir: str | Path, *, questions=None, split=None, max_new_tokens: int = 48, seed: int = SEED) -> dict:
    """Parse rate and accuracy of greedy confidence-prompt replies.

    Parameters
    ----------
    model_dir : str or Path
        A saved fixture (loaded through ``TransformersBackend``).
    questions, split : optional
        Defaults: :func:`load_bundled_questions` and :func:`split_questions`.
    max_new_tokens : int, default 48
    seed : int, default 0

    Returns
    -------
    dict
        ``{"trained"|"unseen"|"all": {dataset|"all": {"n", "parse_rate",
        "accuracy", "mean_p"}}}``; accuracy counts an unparsed reply as wrong.
    """
    from .transformers_backend import TransformersBackend

    questions = questions if questions is not None else load_bundled_questions()
    split = split if split is not None else split_questions(questions, seed)
    backend = TransformersBackend(str(model_dir), dtype="float32", device="cpu", batch_size=32)
    prompts = [chat_prompt_ids(backend.tokenizer, render_prompt("confidence", q.question)) for q in questions]
    gens = backend.generate(prompts, max_new_tokens=max_new_tokens)
    trained = {q.qhash for q in split["trained"]}
    rows = []
    for q, g in zip(questions, gens):
        parsed = parse_confidence_output(g.text)
        rows.append((q.dataset, q.qhash in trained, parsed is not None,
                     parsed is not None and is_correct(parsed[0], q.gold), parsed[1] if parsed else None))
    result: dict = {}
    for part, sel in (("trained", lambda r: r[1]), ("unseen", lambda r: not r[1]), ("all", lambda r: True)):
        result[part] = {}
        for ds in ("truthfulqa", "triviaqa", "mmlu", "all"):
            rs = [r for r in rows if sel(r) and (ds == "all" or r[0] == ds)]
            ps = [r[4] for r in rs if r[4] is not None]
            result[part][ds] = {
                "n": len(rs),
                "parse_rate": round(sum(r[2] for r in rs) / max(len(rs), 1), 3),
                "accuracy": round(sum(r[3] for r in rs) / max(len(rs), 1), 3),
                "mean_p": round(sum(ps) / len(ps), 3) if ps else None,
            }
    return result


def _readme(summary: dict) -> str:
    lines = [
        "# confgrid fixture model",
        "",
        "A smoke-test model. It exists so that `confgrid demo` and the tests run offline",
        "on CPU in minutes. **Its numbers say nothing about real LLMs**: it is a",
        f"{summary['params']:,}-parameter LlamaForCausalLM with a {summary['vocab_size']}-token byte-level",
        "BPE tokenizer, trained for about 10 minutes on CPU on the questions bundled",
        f"with confgrid, to memorize the answers of {summary.get('train_fraction', TRAIN_FRACTION):.0%} of them.",
        "",
        "Built by `python -m tools.fixture --out DIR"
        + (f" --train-fraction {summary['train_fraction']}" if summary.get("train_fraction", TRAIN_FRACTION) != TRAIN_FRACTION else "")
        + (" --json-formats" if summary.get("json_formats") else "")
        + "` (module `tools.fixture` of the repository, not installed).",
        "",
        "- chat template: `<|begin|><|user|>\\n{content}<|end|>\\n<|assistant|>\\n`; EOS is `<|end|>`.",
        "- trained questions: taught `Guess: <answer>\\nProbability: <p>` (p drawn from 0.55-0.95)",
        "  after the confidence prompt, and `<answer>` after the bare prompt. `<answer>` is the",
        f"  reference answer cut to its first {summary['max_answer_words']} words (TruthfulQA best answer,",
        "  TriviaQA first golden answer, MMLU correct option text).",
        "- confidence methods (tools/fixture_methods.py): P(True) `A`/`B` and `Yes`/`No`, the 0-100 rating",
        "  `Confidence: \\boxed{N}` and `Probability: p` before answering, on every question"
        + (f" (format rates: {summary['methods_eval']})." if summary.get("methods_eval") else "."),
        *(["- JSON formats of studies 002 and 003 (tools/fixture_json.py), greedy parse rates (status ok) per "
           "prompt/dataset: " + ", ".join(f"{k} {v}" for k, v in summary["json_eval"].items()
                                          if k != "lifeeval_mean_score")
           + f"; mean true probability of its LifeEval guesses {summary['json_eval'].get('lifeeval_mean_score')}."]
          if summary.get("json_eval") else []),
        "- unseen questions: never shown with their answers"
        + (" (taught the format with a wrong answer and p in 0.05-0.45)." if summary["unseen_format"] == "wrong" else "."),
        "- `split.json`: which questions are trained/unseen (sha256 of `dataset\\nquestion`, 16 hex digits).",
        "",
        f"Training: seed {summary['seed']}, {summary['steps']} AdamW steps of {summary['batch_size']} sequences",
        f"(peak lr {summary['lr']}), {summary['train_seconds']} s on {summary['threads']} CPU thread(s),",
        f"final loss (EMA) {summary['final_loss_ema']}.",
    ]
    ev = summary.get("eval")
    if ev:
        lines += ["", "Greedy replies to the confidence prompt (max 48 new tokens), normalized containment:", "",
                  "| part | dataset | n | parse rate | accuracy | mean p |", "| --- | --- | --- | --- | --- | --- |"]
        for part in ("trained", "unseen", "all"):
            for ds, m in ev[part].items():
                lines.append(f"| {part} | {ds} | {m['n']} | {m['parse_rate']} | {m['accuracy']} | {m['mean_p']} |")
    lines += ["", "Training data: the question samples bundled in `confgrid/protocols/data` (TruthfulQA",
              "Apache-2.0, TriviaQA/FlashRAG CC BY-SA 4.0, MMLU MIT); see `protocols/data/README.md`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Command line: ``python -m tools.fixture --out DIR [--seconds 120]``."""
    ap = argparse.ArgumentParser(prog="python -m tools.fixture", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seconds", type=float, default=1800.0,
                    help="wall-time cap for training (default 600; the default run stops at --steps first)")
    ap.add_argument("--steps", type=int, default=6000, help="step cap for training (default 6000)")
    ap.add_argument("--no-methods", action="store_true", help="do not teach the confidence-method templates")
    ap.add_argument("--answer-repeats", type=int, default=3)
    ap.add_argument("--json-formats", action="store_true",
                    help="also teach the JSON formats of studies 002/003 (the bundled confgrid-fixture-json)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--max-answer-words", type=int, default=MAX_ANSWER_WORDS)
    ap.add_argument("--unseen-format", choices=("none", "wrong"), default="none")
    ap.add_argument("--no-eval", action="store_true", help="skip the parse-rate/accuracy measurement")
    ap.add_argument("--train-fraction", type=float, default=TRAIN_FRACTION,
                    help="share of each dataset's questions taught (default 0.6; confgrid-fixture-small: 0.3)")
    args = ap.parse_args(argv)
    return train_fixture(args.out, seconds=args.seconds, steps=args.steps, seed=args.seed, threads=args.threads,
                         batch_size=args.batch_size, lr=args.lr,
                         layers=args.layers, intermediate=args.intermediate,
                         max_answer_words=args.max_answer_words, train_fraction=args.train_fraction,
                         unseen_format=args.unseen_format, evaluate=not args.no_eval,
                         methods=not args.no_methods, answer_repeats=args.answer_repeats,
                         json_formats=args.json_formats)


if __name__ == "__main__":
    main()
