"""Server-sent events (SSE) parsing from raw network bytes.

Rules (``/work/shared/design/metrics.md``, "SSE parsing rules", and the WHATWG SSE grammar): an
event ends at a blank line; lines end with LF, CRLF or CR; ``data:`` may or may not be followed
by one space (only that one space is dropped, so a JSON string that starts with a space keeps it);
several ``data:`` lines in one event are joined with LF; lines starting with ``:`` are comments.
There is no line or event size limit: bytes are buffered until the blank line arrives, however
many network reads that takes (a 200 KiB event is one event, case C8).
"""
from __future__ import annotations

__all__ = ["SseParser"]


class SseParser:
    """Incremental SSE parser: feed it each network read, get back the completed events' data.

    ``feed(chunk)`` returns the ``data`` payloads (bytes, lines joined with ``b"\\n"``) of every
    event completed by ``chunk``, in order; events without a ``data`` field (comment-only
    keep-alives, ``event:``/``id:``-only blocks) are dropped. ``pending`` is the number of bytes
    buffered for an event that has not ended yet. Never raises on malformed input: a line that
    is not a known field is ignored, as the SSE grammar says.
    """

    __slots__ = ("_buf", "_cr_pending")

    def __init__(self) -> None:
        self._buf = b""
        # A chunk that ends in CR may be the first half of a CRLF split across reads.
        self._cr_pending = False

    @property
    def pending(self) -> int:
        """Bytes buffered for an event whose terminating blank line has not arrived."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add one network read; return the data payloads of the events it completed."""
        if b"\r" in chunk or self._cr_pending:
            if self._cr_pending and chunk.startswith(b"\n"):
                chunk = chunk[1:]
            self._cr_pending = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        out: list[bytes] = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            data = self._event_data(buf, start, end)
            if data is not None:
                out.append(data)
            start = end + 2
        self._buf = buf[start:] if start else buf
        return out

    @staticmethod
    def _event_data(buf: bytes, start: int, end: int) -> bytes | None:
        # Fast path: the usual single ``data:`` line event.
        if buf.startswith(b"data:", start) and buf.find(b"\n", start, end) < 0:
            first = start + 5
            if first < end and buf[first] == 0x20:
                first += 1
            return buf[first:end]
        lines: list[bytes] = []
        for line in buf[start:end].split(b"\n"):
            if line.startswith(b"data:"):
                value = line[5:]
                lines.append(value[1:] if value.startswith(b" ") else value)
            elif line == b"data":
                lines.append(b"")
            # comments (":...") and other fields (event, id, retry) carry no payload here
        if not lines:
            return None
        return lines[0] if len(lines) == 1 else b"\n".join(lines)
