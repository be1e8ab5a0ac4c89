"""daphne's access log through Python logging, so secret values are masked in it.

daphne writes each access line (``127.0.0.1 - - [..] "GET /api/recipes/?node=..." 200 12``)
straight to stdout with ``AccessLogGenerator``, past every logging filter: a secret value typed
into a URL, as typed or percent-encoded, reached ``var/logs/web.log`` in clear.
:func:`access_log_through_logging` (called by :mod:`controlplane.asgi`, which daphne imports
before it builds its server) makes daphne build :class:`RedactedAccessLog` instead: each line
goes to the ``daphne.access`` logger, whose ``redact`` filter (settings ``LOGGING``) masks
stored and registered secret values in every spelling :func:`controlplane.redaction.redact_text`
knows. An ``--access-log FILE`` still gets its lines, masked the same way.

daphne calls the access logger on its event loop, where the redaction never reads the database
(it must not block the loop), so a freshly started server would mask only what it already knew.
The lines are therefore handed to one thread of their own, in order, and logged there: the
redaction reads the stored values when its cache is older than
:data:`controlplane.redaction.STORED_VALUES_MAX_AGE_S` and uses the cache otherwise.
"""
from __future__ import annotations

import atexit
import logging
import queue
import sys
import threading

from controlplane.redaction import redact_text

log = logging.getLogger("daphne.access")


class RedactedAccessLog:
    """daphne's ``action_logger`` (same call as ``daphne.access.AccessLogGenerator``), its
    lines logged on ``daphne.access`` (stdout) or written masked to ``stream`` (any other)."""

    def __init__(self, stream=None):
        from daphne.access import AccessLogGenerator

        self.stream = stream
        self._format = AccessLogGenerator(self)  # its write_entry formats; its stream is us
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="access-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def __call__(self, protocol, action, details):
        self._format(protocol, action, details)

    def write(self, text: str) -> None:
        """Called by the formatter with one finished line."""
        self._lines.put(text)

    def _drain(self) -> None:
        while True:
            line = self._lines.get()
            try:
                if line is None:
                    return
                self._emit(line)
            except Exception:  # noqa: BLE001 - a line that cannot be written never stops the log
                pass
            finally:
                self._lines.task_done()

    def _emit(self, line: str) -> None:
        if self.stream is None or self.stream is sys.stdout or self.stream is sys.__stdout__:
            log.info("%s", line.rstrip("\n"))
        else:
            self.stream.write(redact_text(line))
            self.stream.flush()

    def flush(self) -> None:
        """Wait until every line handed over so far is written."""
        self._lines.join()

    def close(self) -> None:
        if self._thread.is_alive():
            self._lines.put(None)
            self._thread.join(timeout=5)


def access_log_through_logging() -> bool:
    """Make daphne's command line build :class:`RedactedAccessLog` as its access logger.
    Returns whether it changed anything (False once done, or when daphne is not installed)."""
    try:
        from daphne import cli
    except ImportError:
        return False
    if cli.AccessLogGenerator is RedactedAccessLog:
        return False
    cli.AccessLogGenerator = RedactedAccessLog
    return True
