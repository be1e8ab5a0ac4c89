"""Reading the end of a process log written by the shim (``<log>`` plus rotated ``<log>.1``)."""
from __future__ import annotations

import os
import re
from pathlib import Path


def _read_end(path: Path, max_bytes: int) -> tuple[bytes, bytes]:
    """The last ``max_bytes`` bytes of the file at ``path`` and the byte just before them (``b""``
    when they start the file); ``(b"", b"")`` for a file that cannot be read."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            fh.seek(max(0, start - 1))
            data = fh.read(max_bytes + (1 if start else 0))
    except OSError:
        return b"", b""
    return (data[1:], data[:1]) if start else (data, b"")


# Bytes after which a line starts, as str.splitlines() splits (its multi-byte separators aside:
# after one of those a whole line is left out, never part of one shown).
_LINE_ENDS = frozenset(bytes([b]) for b in b"\n\r\x0b\x0c\x1c\x1d\x1e")


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
    Only whole lines are given: where ``max_bytes`` cuts into a line (the bytes read do not start
    the log, nor follow a line end), what was read of it is left out, so a tail never starts with
    the end of a secret whose beginning lies before what was read, which no masking could
    recognise. A line longer than ``max_bytes`` is left out whole.
    """
    path = Path(path)
    data, before = _read_end(path, max_bytes)
    if not before:
        # what was read starts the current file: the rotated part comes before it
        older, before = _read_end(Path(f"{path}.1"), max_bytes - len(data))
        data = older + data
    if before == b"\r" and data[:1] == b"\n":
        data = data[1:]   # the rest of a CRLF line end
    text = strip_ansi(data.decode("utf-8", errors="replace"))
    all_lines = text.splitlines()
    if before and before not in _LINE_ENDS:
        all_lines = all_lines[1:]   # the end of a line that began before what was read
    kept = all_lines[-lines:] if lines > 0 else []
    return "\n".join(kept)
