"""Server-process log files as the control plane serves them: which file a row may name, the
parts of one log, and a redacting reader for downloads.

``ServerProcess.log_path`` is a database value. Every reader here (the page's tail and
download, the API's tail and download) serves a file only when its resolved path lies inside
``settings.CEILING_LOG_DIR``, the supervisor's own log directory, never an arbitrary path
written into the row.
"""
from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import Any

from django.conf import settings

from controlplane.redaction import RedactingStream

# A download reads its log in pieces of 64 KiB.
DOWNLOAD_CHUNK_BYTES = 64 * 1024


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

    The parts are one text, masked as one (:class:`controlplane.redaction.RedactingStream`): the
    shim rotates between two reads of the engine's output, which can fall inside a line (an engine
    whose stdout is block-buffered writes 8 KiB at a time, whatever its lines), so a secret may
    begin at the end of ``<log>.1`` and end at the start of ``<log>``; it is masked whole, as the
    tail masks it, and so is one that a read of :data:`DOWNLOAD_CHUNK_BYTES` cuts, however long
    its line. Each read returns what the stream gives out for the next pieces read (so a read
    returns ``b""`` only at the end); ``size`` is only a hint, which suits
    :class:`~django.http.FileResponse`'s read loop. Bytes round-trip through ``surrogateescape``
    (decoded incrementally, so a character split between two reads is read whole) and non-UTF-8
    output reaches the download unchanged except where a secret was masked. There is no
    ``seek``/``tell``, so no Content-Length is sent (redaction changes the length).
    """

    def __init__(self, parts: list[Path]):
        self._parts = list(parts)
        self._fh: Any = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self._stream = RedactingStream()
        self._ended = False

    def _next_chunk(self) -> bytes:
        """The next bytes of the parts read one after the other, ``b""`` once all are read."""
        while self._fh is not None or self._parts:
            if self._fh is None:
                try:
                    self._fh = open(self._parts.pop(0), "rb")  # noqa: SIM115 - closed at EOF or in close()
                except OSError:
                    continue
            chunk = self._fh.read(DOWNLOAD_CHUNK_BYTES)
            if chunk:
                return chunk
            self._fh.close()
            self._fh = None
        return b""

    def read(self, size: int = -1) -> bytes:
        while not self._ended:
            chunk = self._next_chunk()
            if chunk:
                text = self._stream.feed(self._decoder.decode(chunk))
            else:
                self._ended = True
                text = self._stream.feed(self._decoder.decode(b"", final=True)) + self._stream.end()
            if text:
                return text.encode("utf-8", errors="surrogateescape")
        return b""

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._parts = []
        self._ended = True
