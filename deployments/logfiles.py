"""Server-process log files as the control plane serves them: which file a row may name, the
parts of one log, and a redacting reader for downloads.

``ServerProcess.log_path`` is a database value. Every reader here (the page's tail and
download, the API's tail and download) serves a file only when its resolved path lies inside
``settings.CEILING_LOG_DIR``, the supervisor's own log directory, never an arbitrary path
written into the row.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings

from controlplane.redaction import redact_text

# A download is redacted in pieces of about 64 KiB, each extended to the end of its line; a
# line longer than 1 MiB is cut there (only such a pathological line could split a secret).
DOWNLOAD_CHUNK_BYTES = 64 * 1024
DOWNLOAD_LINE_MAX_BYTES = 1024 * 1024


def log_file(log_path: str) -> Path | None:
    """The resolved path of a recorded log if it, and its rotated ``<log>.1`` when there is
    one, lie inside ``settings.CEILING_LOG_DIR`` (after resolving ``..`` and symlinks), else
    None (also for "" and relative paths)."""
    if not log_path or not os.path.isabs(log_path):
        return None
    try:
        root = Path(settings.CEILING_LOG_DIR).resolve()
        path = Path(log_path).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if path == root or not path.is_relative_to(root):
        return None
    # The rotated part is read with it (log_parts, the tail): it must lie inside too, else none
    # of the log is served (a link planted as "<log>.1" would make the tail read any file).
    rotated = Path(f"{path}.1")
    if os.path.lexists(rotated):
        try:
            inside = rotated.resolve().is_relative_to(root) and rotated.resolve() != root
        except (OSError, RuntimeError, ValueError):
            inside = False
        if not inside:
            return None
    return path


def log_parts(path: Path) -> list[Path]:
    """The files making up one log, oldest first: the rotated ``<log>.1`` (the shim keeps one)
    then ``<log>``; only regular files that exist."""
    return [p for p in (Path(f"{path}.1"), path) if p.is_file()]


class RedactedLogReader:
    """A read-only file-like view of a log's parts (rotated then current) that passes the text
    through :func:`controlplane.redaction.redact_text` before it leaves the server.

    Each read returns about :data:`DOWNLOAD_CHUNK_BYTES`, extended to the end of the line so a
    secret (one token, never spanning a newline) is always redacted whole; ``size`` is only a
    hint, which suits :class:`~django.http.FileResponse`'s read loop. Bytes round-trip through
    ``surrogateescape`` so non-UTF-8 output reaches the download unchanged except where a
    secret was masked. There is no ``seek``/``tell``, so no Content-Length is sent (redaction
    changes the length).
    """

    def __init__(self, parts: list[Path]):
        self._parts = list(parts)
        self._fh: Any = None

    def read(self, size: int = -1) -> bytes:
        while self._fh is not None or self._parts:
            if self._fh is None:
                try:
                    self._fh = open(self._parts.pop(0), "rb")  # noqa: SIM115 - closed at EOF or in close()
                except OSError:
                    continue
            chunk = self._fh.read(DOWNLOAD_CHUNK_BYTES)
            if not chunk:
                self._fh.close()
                self._fh = None
                continue
            if not chunk.endswith(b"\n"):
                chunk += self._fh.readline(DOWNLOAD_LINE_MAX_BYTES)
            text = chunk.decode("utf-8", errors="surrogateescape")
            return redact_text(text).encode("utf-8", errors="surrogateescape")
        return b""

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._parts = []
