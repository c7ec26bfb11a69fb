"""(width, height) of a PNG read from its IHDR chunk: an independent reader (no matplotlib, no PIL) for the figure tests."""

from __future__ import annotations

import struct
from pathlib import Path


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG's IHDR chunk (an independent reader: no matplotlib, no PIL)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])
