"""The request-level answer cache of API models: no paid answer is thrown away.

Every well-formed answer of an OpenAI-compatible server is stored, as it arrives, under the SHA-256 of the request's
content (:func:`request_key`), atomically, and a later request with the same content reads it instead of being sent
again (a ``resume`` sends only what was never answered): docs/guides/api-models.md. The stored text is the server's
body as received; it holds no key (the key only travels in the ``Authorization`` header).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["CACHE_DIR", "request_key", "AnswerCache"]

#: The cache's folder inside a run directory.
CACHE_DIR = "api_cache"


def request_key(model: str, base_url: str, body: dict[str, Any]) -> str:
    """SHA-256 (64 hex digits) of one request's content: the model, the server's API root and every other field of
    the request as sent (``body``, JSON-serializable), whatever the order of the dict's keys."""
    text = json.dumps({"model": model, "base_url": base_url, "body": body}, sort_keys=True, ensure_ascii=False,
                      separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class AnswerCache:
    """Stored answers under ``root`` (normally ``<run dir>/api_cache``; created when missing), one file per request
    key."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        """Where the answer of ``key`` is stored."""
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The stored body of ``key``, or None (never stored, or unreadable: then it is asked again)."""
        try:
            return self.path(key).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def put(self, key: str, body: str) -> None:
        """Store ``body`` under ``key`` atomically (temporary file, fsync, rename); a present entry is kept."""
        final = self.path(key)
        if final.exists():
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", suffix=".tmp", dir=final.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(body)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("??/*.json"))
