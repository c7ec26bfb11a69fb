"""What the phases of benchmarks/gpu_check.py share: log lines, the prompts written by the build phase, token counts
and rates, the device memory cache, and what a phase had done when it failed (``PROGRESS``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

#: The repository root (tools/ is imported from there; it is not installed).
REPO = Path(__file__).resolve().parents[2]
#: Facts a phase records as it goes; a failing phase's result keeps them beside the error.
PROGRESS: dict = {}


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _load_prompts(ctx: dict) -> dict:
    p = json.loads((Path(ctx["work"]) / "prompts.json").read_text())
    p["score_pairs"] = [(list(c), list(a)) for c, a in p["score_pairs"]]
    p["parity_pairs"] = [(list(c), list(a)) for c, a in p["parity_pairs"]]
    return p


def _tokens(pairs) -> tuple[int, int]:
    return sum(len(c) + len(a) for c, a in pairs), sum(len(a) for _, a in pairs)


def _rate(tokens: int, seconds: float) -> float:
    return round(tokens / seconds, 1) if seconds > 0 else 0.0


def gc_cuda(torch) -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
