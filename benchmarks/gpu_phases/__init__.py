"""The measurements of benchmarks/gpu_check.py, one module per family of phases.

gpu_check.py (the driver: install, time budget, one subprocess per phase, the report) runs each phase as
``gpu_check.py --phase NAME``, which calls ``phase_NAME(ctx)`` from here and writes its JSON:

* :mod:`gpu_phases.build`: the random Llama model, its tokenizer and every phase's prompts; the matmul ceiling.
* :mod:`gpu_phases.tf`: the transformers backend (scoring, generation against raw ``model.generate``, parity
  set, profile).
* :mod:`gpu_phases.vllm_phases`: confgrid's vLLM path (through the Ray ``ModelActor`` or directly), a raw
  ``vllm.LLM``, and float32 parity.
* :mod:`gpu_phases.common`: what the phases share (log lines, the prompts file, token counts and rates).
"""
