"""Per-process shim: the session leader that execs one engine process and owns its log.

Run as a program, never imported by the control plane (it uses the standard library only, so
it can start with ``python -I -S`` and ignore the engine's ``PYTHONPATH``)::

    python -I -S shim.py --log LOG --max-bytes N --exit-file FILE --report-fd FD [--cpus LIST] -- ARGV...

What it does, in order:

1. Marks itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux >= 3.4), so a
   descendant whose parent dies is reparented here rather than to init and stays findable
   through the process tree.
2. Forks one child, which points stdout and stderr at a pipe, restores the signal dispositions
   Python changed (``SIGPIPE``, ``SIGXFSZ``), applies ``sched_setaffinity`` when ``--cpus`` is
   given (so the engine and all its descendants inherit the CPU list) and execs ``ARGV`` with
   ``execvp``; the environment is the shim's own, which the spawner built.
3. Reports ``ok <pid> <start_ticks>`` (or ``err <message>``) on ``--report-fd`` once the exec
   has happened: the classic close-on-exec error pipe tells success (EOF, no data) from failure.
4. Copies the pipe into ``LOG``, rotating to ``LOG.1`` before a write would push ``LOG`` past
   ``--max-bytes``: each file stays at or below the cap, so at most twice the cap is on disk.
   The rotation falls on a line end of the read being written where one fits under the cap, so
   a line is seldom split between the two files (readers join them either way).
   The shim lives in the engine's session, so the cap holds whoever started it and whether or
   not that process still runs.
5. On the first stop signal while the engine runs, writes ``<exit-file>.stop`` (pid,
   start_ticks, stop_signal, stop_signal_at) within one loop wake-up (0.25 s at most), so a
   stop resumed by another agent can tell when the first SIGTERM went out.
6. When the engine exits, writes ``--exit-file`` atomically (JSON: pid, start_ticks, returncode,
   signal, ended_at, stop_signal, stop_signal_at) and a closing line in the log; it keeps draining
   until the pipe is closed by every holder and no reparented descendant is left, then exits 0.

``SIGTERM``, ``SIGINT`` and ``SIGHUP`` do not end the shim, so that a stop signalled to the whole
process group lets it record the engine's last words and exit status; ``SIGKILL`` still ends it.
The first of them to arrive before the engine ended is recorded (``stop_signal``, its number, and
``stop_signal_at``, seconds since the epoch): a stop sent to the group, as
:func:`deployments.supervisor.process_stop` sends it, so whoever reads the record can tell an
engine that was asked to stop and then exited with code 0 (llama.cpp's server does) from one that
ended on its own. A signal sent to the engine's pid alone does not reach the shim and is not
recorded. If the shim itself is killed first, the engine's next write to stdout fails
(``EPIPE``/``SIGPIPE``), the same trade-off every log-owning shim (e.g. conmon) makes; nothing
can reattach a pipe the engine holds, so the node agent records that log capture stopped
(:func:`deployments.supervisor.process.shim_gone`) and the engine's exit goes unrecorded.
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import select
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # include/uapi/linux/prctl.h
READ_CHUNK = 65536
# Reads at most made, once the process has ended, of what it left in the pipe before its end is noted:
# 16 x 64 KiB covers a pipe resized to 1 MiB (F_SETPIPE_SZ's default limit, /proc/sys/fs/pipe-max-size).
DRAIN_READS = 16
_IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Mode of the engine log files: owner read and write only.
LOG_FILE_MODE = 0o600


class CappedLog:
    """Append-only log file of at most ``max_bytes`` bytes with one rotated predecessor ``.1``."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.fd = -1
        self.size = 0
        # whether the engine's output is inside a line whose start was left out (see write)
        self._line_cut = False
        self._open()

    def _open(self) -> None:
        # Owner-only (0600): the file holds what the engine printed, which may include a
        # secret's value in clear (masking happens when Ceiling reads it, not here).
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, LOG_FILE_MODE)
        st = os.fstat(self.fd)
        if st.st_mode & 0o777 != LOG_FILE_MODE:
            try:
                os.fchmod(self.fd, LOG_FILE_MODE)  # a file left by an older version, or a wider umask's
            except OSError:
                pass  # not ours to change; the engine's output still goes to it
        self.size = st.st_size

    def _rotate(self) -> None:
        os.close(self.fd)
        os.replace(self.path, self.path + ".1")
        self._open()

    def write(self, data: bytes) -> None:
        """Append ``data`` (one read of the engine's output, which may end inside a line),
        rotating first when it would push the file past the cap. The rotation falls on a line
        end where one is near: the lines of ``data`` that still fit go to the file first, so
        the rotated file ends with a whole line and the new one starts with one (an engine that
        writes its output in blocks, not lines, would otherwise have a line, and a secret in
        it, split between the two files). The cap always holds: with no line end that fits, the
        rotation falls where the read did."""
        if self._line_cut:
            # the rest of a line whose start was not written: left out up to its end
            end = data.find(b"\n")
            if end < 0:
                return
            data, self._line_cut = data[end + 1:], False
        # A single chunk larger than the cap only keeps its newest bytes, from the first line
        # start among them: writing the older part would be rotated away at once anyway, and a
        # line's end without its start is not written (nor, with no line start among them, the
        # rest of that line in the reads that follow).
        if len(data) > self.max_bytes:
            start = data.find(b"\n", len(data) - self.max_bytes - 1) + 1
            data, self._line_cut = (data[start:], False) if start else (b"", True)
        if self.size and self.size + len(data) > self.max_bytes:
            fits = data.rfind(b"\n", 0, self.max_bytes - self.size) + 1
            if fits:
                self._append(data[:fits])
                data = data[fits:]
            self._rotate()
        self._append(data)

    def _append(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return  # disk full or similar: dropping output beats killing the engine
            view = view[n:]
            self.size += n

    def note(self, text: str) -> None:
        """Write one line of the shim's own, marked so readers can tell it from the engine's."""
        self._line_cut = False
        self.write(f"[ceiling-shim {time.strftime('%Y-%m-%dT%H:%M:%S%z')}] {text}\n".encode())


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return int(fields[19]) if len(fields) > 19 else None


def _parse_cpus(text: str) -> set[int]:
    cpus: set[int] = set()
    for item in text.split(","):
        lo, _, hi = item.strip().partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _signal_text(number: int) -> str:
    """``signal 9 (SIGKILL)``, or the number alone for a signal Linux does not name."""
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


# The first stop signal the group received while the engine ran: [signal number, epoch seconds].
_STOP_SEEN: list = []


def _on_stop_signal(number: int, frame: object) -> None:
    """Handler of :data:`_IGNORED` in the shim: note the first one, otherwise ignore it."""
    if not _STOP_SEEN:
        _STOP_SEEN.extend((int(number), time.time()))


def _write_exit_file(path: str, pid: int, ticks: int | None, status: int) -> None:
    record = {
        "pid": pid,
        "start_ticks": ticks,
        "returncode": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "ended_at": time.time(),
        "stop_signal": _STOP_SEEN[0] if _STOP_SEEN else None,
        "stop_signal_at": _STOP_SEEN[1] if _STOP_SEEN else None,
    }
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)


def _write_stop_file(path: str, pid: int, ticks: int | None) -> None:
    """Publish the first stop signal while the engine still runs: ``<exit-file>.stop`` (JSON:
    pid, start_ticks, stop_signal, stop_signal_at), written atomically. A stop that resumes
    after the stopping agent died reads it to time the grace period and the report from the
    first SIGTERM, not from its own."""
    record = {"pid": pid, "start_ticks": ticks, "stop_signal": _STOP_SEEN[0], "stop_signal_at": _STOP_SEEN[1]}
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # the exit record still carries it


def _child(argv: list[str], out_fd: int, err_w: int, cpus: str | None, close: list[int]) -> None:
    """Runs in the forked child; never returns (execs or ``_exit(127)``)."""
    try:
        for fd in close:
            os.close(fd)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        for sig in (*_IGNORED, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        if cpus:
            os.sched_setaffinity(0, _parse_cpus(cpus))
        os.execvp(argv[0], argv)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
        try:
            os.write(err_w, f"{type(exc).__name__}: {exc}".encode()[:4000])
        finally:
            os._exit(127)


def _read_pipe(fd: int, log: CappedLog, timeout_s: float) -> str:
    """One read of the engine's output pipe ``fd`` into ``log`` if it is readable within
    ``timeout_s`` seconds: ``"data"`` (logged), ``"eof"`` (every writer has closed it; ``fd`` is
    closed here) or ``"idle"`` (nothing to read yet)."""
    if not select.select([fd], [], [], timeout_s)[0]:
        return "idle"
    chunk = os.read(fd, READ_CHUNK)
    if not chunk:
        os.close(fd)
        return "eof"
    log.write(chunk)
    return "data"


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ceiling-shim")
    parser.add_argument("--log", required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--report-fd", type=int, required=True)
    parser.add_argument("--cpus", default=None)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    opts = parser.parse_args(args)
    argv = opts.argv[1:] if opts.argv[:1] == ["--"] else opts.argv
    report_fd = opts.report_fd

    def report(line: str) -> None:
        try:
            os.write(report_fd, (line + "\n").encode())
            os.close(report_fd)
        except OSError:
            pass  # the spawner gave up waiting; the log still says what happened

    log = CappedLog(opts.log, opts.max_bytes)
    if not argv:
        log.note("no command given")
        report("err no command given")
        return 2
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # descendants are still found by their environment tag
    for sig in _IGNORED:
        signal.signal(sig, _on_stop_signal)
        signal.siginterrupt(sig, False)  # a note, not an interruption: select/read/waitpid resume

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()  # both ends close-on-exec (PEP 446)
    pid = os.fork()
    if pid == 0:
        _child(argv, out_w, err_w, opts.cpus, [out_r, err_r, report_fd, log.fd])
    os.close(out_w)
    os.close(err_w)
    failure = b""
    while chunk := os.read(err_r, 4096):
        failure += chunk
    os.close(err_r)
    if failure:
        os.waitpid(pid, 0)
        message = failure.decode(errors="replace")
        log.note(f"could not start {argv[0]}: {message}")
        report(f"err {message}")
        return 127
    ticks = _start_ticks(pid)  # still readable: the child is not reaped before this line
    report(f"ok {pid} {ticks if ticks is not None else -1}")

    eof = False
    main_done = False
    stop_published = False
    while True:
        if _STOP_SEEN and not stop_published and not main_done:
            stop_published = True
            _write_stop_file(opts.exit_file + ".stop", pid, ticks)
        if not eof:
            eof = _read_pipe(out_r, log, 0.25) == "eof"
        while True:
            try:
                # Blocking once the pipe is closed: only reparented descendants remain.
                got, status = os.waitpid(-1, 0 if eof else os.WNOHANG)
            except ChildProcessError:
                got, status = -1, 0
            except InterruptedError:
                continue
            if got <= 0:
                break
            if got == pid and not main_done:
                main_done = True
                _write_exit_file(opts.exit_file, pid, ticks, status)
                # Everything the process wrote is in the pipe by now (its writes completed before it
                # ended): log what is waiting there before the note, so the note follows its last line
                # (reaped within a read's time, it would otherwise come before that line).
                for _ in range(DRAIN_READS):   # bounded: a descendant may keep the pipe busy
                    read = "idle" if eof else _read_pipe(out_r, log, 0)
                    eof = eof or read == "eof"
                    if read != "data":
                        break
                how = (
                    f"exit code {os.WEXITSTATUS(status)}" if os.WIFEXITED(status)
                    else _signal_text(os.WTERMSIG(status))
                )
                log.note(f"process {pid} ended with {how}")
        if eof and got < 0:
            return 0


if __name__ == "__main__":
    sys.exit(main())
