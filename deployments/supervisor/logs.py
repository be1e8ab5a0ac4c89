"""Reading the end of a process log written by the shim (``<log>`` plus rotated ``<log>.1``)."""
from __future__ import annotations

import os
import re
from pathlib import Path


def _read_end(path: Path, max_bytes: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            return fh.read(max_bytes)
    except OSError:
        return b""


# CSI sequences (colours, cursor moves) and OSC titles: engines such as sglang-router colour
# their log lines even when stdout is a file, which a reader of the tail cannot use.
_ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\))")


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences (terminal colours) from ``text``."""
    return _ANSI_ESCAPE.sub("", text)


def log_tail(path: Path | str, *, max_bytes: int = 65536, lines: int = 50) -> str:
    """The last ``lines`` lines of the log at ``path``, reading at most ``max_bytes`` bytes.

    When the current file holds fewer bytes than ``max_bytes`` the end of the rotated ``.1``
    file is read first, so a tail straddling a rotation is complete. Undecodable bytes are
    replaced (logs are UTF-8 by convention, not by guarantee) and terminal colour codes are
    removed; a missing log gives "".
    The first line may be partial when ``max_bytes`` cut into it.
    """
    path = Path(path)
    data = _read_end(path, max_bytes)
    if len(data) < max_bytes:
        data = _read_end(Path(f"{path}.1"), max_bytes - len(data)) + data
    text = strip_ansi(data.decode("utf-8", errors="replace"))
    kept = text.splitlines()[-lines:] if lines > 0 else []
    return "\n".join(kept)
