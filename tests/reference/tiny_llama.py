"""The random tiny Llama of the backend tests (tests/actors, tests/vllm_cpu), in two sizes, and its corpus."""

from __future__ import annotations

import torch

#: What the tiny models' tokenizer is trained on (``tools.fixture.build_tokenizer(CORPUS, vocab_size=300)``).
CORPUS = [
    "What is the capital of France? Paris is the capital of France.",
    "Guess: Paris\nProbability: 0.9",
    "Give your best short answer to the question below.",
    "Which planet is largest? Jupiter is the largest planet.",
    "The quick brown fox jumps over the lazy dog. 0123456789",
] * 20

#: The sizes: ``small`` for the transformers tests, ``hd64`` (head_dim 64) for the vLLM tests.
SIZES = {
    "small": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, head_dim=16,
                  max_position_embeddings=256, tie_word_embeddings=True),
    "hd64": dict(hidden_size=128, intermediate_size=256, num_attention_heads=2, head_dim=64,
                 max_position_embeddings=512, tie_word_embeddings=False),
}


def tiny_llama(tokenizer, size: str = "small", *, seed: int = 0):
    """A random two-layer ``LlamaForCausalLM`` of ``size`` for ``tokenizer``, its weights drawn after
    ``torch.manual_seed(seed)``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        num_hidden_layers=2,
        num_key_value_heads=2,
        initializer_range=0.2,  # spread-out logits: no near-ties for greedy decoding
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **SIZES[size],
    )
    return LlamaForCausalLM(config)
