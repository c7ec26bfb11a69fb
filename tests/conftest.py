"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The real Qwen3-8B tokenizer files (no weights); see fixtures/qwen3_tokenizer/SOURCE.md.
QWEN3_DIR = Path(__file__).parent / "fixtures" / "qwen3_tokenizer"


@pytest.fixture(scope="session")
def qwen3():
    """The Qwen3 tokenizer, loaded once per test session (about 15 s: built from vocab.json and merges.txt)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(QWEN3_DIR), local_files_only=True)
    # the reference ids recorded with the snapshot (shared/models SOURCES.md)
    assert tok("The capital of France is Paris.", add_special_tokens=False)["input_ids"] == [
        785, 6722, 315, 9625, 374, 12095, 13,
    ]
    return tok
