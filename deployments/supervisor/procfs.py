"""Reading process facts from Linux ``/proc`` (see ``man 5 proc``).

Everything here is read-only and works from any process of the same user (or root), which is
what lets a restarted node agent find engines started by its predecessor.
"""
from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

TAG_ENV = "CEILING_PROC_ID"
"""Environment variable set on every spawned process; descendants inherit it through exec."""

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Clock ticks per second of the CPU times in ``/proc/<pid>/stat`` (``USER_HZ``, 100 on Linux)."""


@dataclass(frozen=True)
class ProcInfo:
    """One row of ``/proc/<pid>/stat``: ids, state letter (``R``, ``S``, ``Z``...),
    ``start_ticks`` (field 22, clock ticks after boot; with the pid it identifies a process) and
    ``cpu_ticks``, the CPU time in clock ticks (:data:`CLK_TCK` a second) the process used in
    user and system mode plus that of the children it has waited for (fields 14 to 17:
    ``utime + stime + cutime + cstime``)."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_ticks: int
    comm: str
    cpu_ticks: int = 0

    @property
    def running(self) -> bool:
        """False for zombies (``Z``) and dead entries (``X``): they can no longer do anything."""
        return self.state not in ("Z", "X")


def proc_stat(pid: int) -> ProcInfo | None:
    """Parse ``/proc/<pid>/stat``; None when the process does not exist (or vanished mid-read).

    The command name (field 2) may contain spaces and parentheses, so fields are split after
    the *last* ``)``, as ``proc(5)`` recommends.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except OSError:
        return None
    close = raw.rfind(b")")
    rest = raw[close + 2:].split()
    if close < 0 or len(rest) < 20:
        return None
    return ProcInfo(
        pid=pid,
        ppid=int(rest[1]),
        pgid=int(rest[2]),
        sid=int(rest[3]),
        state=rest[0].decode(),
        start_ticks=int(rest[19]),
        comm=raw[raw.find(b"(") + 1:close].decode(errors="replace"),
        # rest[0] is field 3 (state): fields 14-17 are rest[11:15].
        cpu_ticks=sum(int(v) for v in rest[11:15]),
    )


def proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks after boot (``/proc/<pid>/stat`` field 22), or None."""
    info = proc_stat(pid)
    return info.start_ticks if info else None


def proc_pids() -> list[int]:
    """Every pid currently listed in ``/proc`` (threads are not listed at this level)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def proc_scan() -> dict[int, ProcInfo]:
    """One pass over ``/proc``: pid → :class:`ProcInfo` for every process that could be read.

    A scan is used instead of ``/proc/<pid>/task/*/children`` because that file only exists
    on kernels built with ``CONFIG_PROC_CHILDREN`` (not all are) and misses nothing here.
    """
    table: dict[int, ProcInfo] = {}
    for pid in proc_pids():
        info = proc_stat(pid)
        if info is not None:
            table[pid] = info
    return table


def proc_has_tag(pid: int, tag: str) -> bool:
    """True when ``/proc/<pid>/environ`` holds exactly ``CEILING_PROC_ID=<tag>``.

    ``environ`` is the environment the process was exec'd with; it needs the same user or
    root to read (``ptrace`` access mode), and is empty for kernel threads and zombies.
    Unreadable counts as untagged, so a process of another user is never claimed.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read()
    except OSError:
        return False
    return (b"\0" + f"{TAG_ENV}={tag}".encode() + b"\0") in (b"\0" + environ + b"\0")


def proc_tagged(tag: str, table: dict[int, ProcInfo] | None = None) -> set[int]:
    """Pids of live (non-zombie) processes whose environment carries ``tag``."""
    table = proc_scan() if table is None else table
    return {pid for pid, info in table.items() if info.running and proc_has_tag(pid, tag)}


def proc_subtree(root: int, table: dict[int, ProcInfo]) -> set[int]:
    """Pids of every descendant of ``root`` in ``table`` (not ``root`` itself), by parent links."""
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: set[int] = set()
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid in found or pid == root:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def proc_tree_cpu_s(pid: int, start_ticks: int, table: dict[int, ProcInfo] | None = None) -> float | None:
    """CPU seconds (user + system) used so far by the process ``pid`` and every descendant it has
    now, with the time of the children each of them has waited for (:attr:`ProcInfo.cpu_ticks`),
    from ``table`` (default: a fresh :func:`proc_scan`). None when ``pid`` is gone, a zombie, or
    another process than the one started at ``start_ticks`` (a reused pid is never read).

    Two readings give the CPU the tree used in between: a child that ended and was reaped
    meanwhile moves its time into its parent's ``cutime``, so it still counts; only a descendant
    that left the tree (reparented to a subreaper or init) takes its time away, which is why a
    difference should be clamped at zero.
    """
    table = proc_scan() if table is None else table
    root = table.get(pid)
    if root is None or root.start_ticks != start_ticks or not root.running:
        return None
    members = {pid} | proc_subtree(pid, table)
    return sum(table[member].cpu_ticks for member in members) / CLK_TCK


def proc_exe_name(pid: int) -> str:
    """Base name of the executable (``/proc/<pid>/exe``), falling back to ``comm``; "" if gone."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        info = proc_stat(pid)
        return info.comm if info else ""


# TCP state code of a listening socket in ``/proc/net/tcp`` (``include/net/tcp_states.h``).
_TCP_LISTEN = "0A"


def _tcp_rows() -> Iterator[tuple[str, int, str, int]]:
    """Every TCP socket of this network namespace as ``(state code, local port, remote
    endpoint as in the file, inode)``, read from ``/proc/net/tcp`` and ``/proc/net/tcp6``.

    Row format (``proc(5)``): ``sl local_address rem_address st ... uid timeout inode``, each
    address as ``HEXADDR:HEXPORT``; the inode is the tenth field (0 for a socket no process
    holds, e.g. in time-wait). A missing file (no IPv6) contributes nothing; a malformed row is
    skipped.
    """
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            try:
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                inode = int(fields[9])
            except (IndexError, ValueError):
                continue
            yield fields[3], local_port, fields[2], inode


def tcp_listen_inodes(port: int) -> set[int]:
    """Socket inodes of every TCP socket in LISTEN state on local ``port`` (any address), read
    from ``/proc/net/tcp`` and ``/proc/net/tcp6`` of this network namespace (:func:`_tcp_rows`)."""
    return {inode for state, local_port, _remote, inode in _tcp_rows()
            if state == _TCP_LISTEN and local_port == port and inode}


def proc_socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets ``pid`` holds open: the ``socket:[<inode>]`` targets of
    ``/proc/<pid>/fd/*``. Empty when the process is gone or its fds are unreadable (another
    user's process without root)."""
    inodes: set[int] = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            try:
                inodes.add(int(target[8:-1]))
            except ValueError:
                continue
    return inodes


def port_listeners(port: int, table: dict[int, ProcInfo] | None = None) -> tuple[set[int], set[int]]:
    """Who listens on TCP ``port``: ``(inodes, pids)``, the LISTEN socket inodes (see
    :func:`tcp_listen_inodes`) and the pids holding one of them open. ``pids`` can be empty
    while ``inodes`` is not when the holder's fds are unreadable (another user)."""
    inodes = tcp_listen_inodes(port)
    if not inodes:
        return inodes, set()
    table = proc_scan() if table is None else table
    pids = {pid for pid in table if proc_socket_inodes(pid) & inodes}
    return inodes, pids


# TCP states of ``/proc/net/tcp`` (``include/net/tcp_states.h``), in words.
_TCP_STATES = {"01": "established", "02": "syn-sent", "03": "syn-received", "04": "fin-wait-1",
               "05": "fin-wait-2", "06": "time-wait", "07": "closed", "08": "close-wait", "09": "last-ack",
               "0A": "listening", "0B": "closing", "0C": "new-syn-received"}


def _hex_endpoint(text: str) -> str:
    """``0100007F:1F90`` (``/proc/net/tcp``, IPv4 little-endian) → ``127.0.0.1:8080``; an IPv6
    endpoint keeps its port and says ``[ipv6]``."""
    addr, _, port = text.rpartition(":")
    try:
        number = int(port, 16)
        if len(addr) == 8:
            host = ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
        else:
            host = "[ipv6]"
    except ValueError:
        return text
    return f"{host}:{number}"


def port_socket_text(port: int, limit: int = 3) -> str:
    """A short description of the sockets that are not listening but use local TCP ``port``
    (a connection whose source port it is, or one closing), e.g. ``"an established connection
    to 127.0.0.1:44601 of pid 24043 (celeryd: agent)"`` or ``"a time-wait connection to
    127.0.0.1:44603 (held by the kernel for up to 60 s after it closed)"``; at most ``limit``,
    ``""`` when there is none. Source: ``/proc/net/tcp{,6}`` (``proc(5)``) and the pids'
    ``/proc/<pid>/fd`` (a time-wait socket has no owner: inode 0)."""
    rows = [(_TCP_STATES.get(state, state), _hex_endpoint(remote), inode)
            for state, local_port, remote, inode in _tcp_rows() if state != _TCP_LISTEN and local_port == port]
    if not rows:
        return ""
    owners: dict[int, int] = {}
    wanted = {inode for _s, _r, inode in rows if inode}
    if wanted:
        for pid in proc_scan():
            for inode in proc_socket_inodes(pid) & wanted:
                owners.setdefault(inode, pid)
    parts = []
    for state, remote, inode in rows[:limit]:
        text = f"a{'n' if state[0] in 'aeiou' else ''} {state} connection to {remote}"
        pid = owners.get(inode)
        if pid is not None:
            info = proc_stat(pid)
            text += f" of pid {pid} ({info.comm})" if info else f" of pid {pid}"
        elif state == "time-wait":
            text += " (held by the kernel for up to 60 s after it closed)"
        parts.append(text)
    more = len(rows) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def port_listener_text(port: int) -> str:
    """A short human description of the listener(s) of ``port``, e.g. ``"pid 4121 (python3)"``;
    ``""`` when nobody listens or the holder cannot be told."""
    _inodes, pids = port_listeners(port)
    parts = []
    for pid in sorted(pids):
        info = proc_stat(pid)
        parts.append(f"pid {pid} ({info.comm})" if info else f"pid {pid}")
    return ", ".join(parts)


def port_busy_reason(*, host: str, port: int) -> str:
    """Whether TCP ``port`` can be bound on ``host`` of this machine right now: ``""`` when it
    can, else ``"port P on H is already in use"`` followed by the holder (``by pid X (comm)``)
    when ``/proc/net/tcp{,6}`` and ``/proc/*/fd`` tell it.

    The probe socket binds with ``SO_REUSEADDR`` off and is closed at once. Linux also refuses
    such a bind while only ``TIME_WAIT`` remnants of an earlier server hold the port; engines
    (uvicorn, aiohttp, sglang-router) bind with ``SO_REUSEADDR`` on and start fine then, so a
    refused bind with no LISTEN socket on the port is retried with ``SO_REUSEADDR`` on, which
    fails only for a live listener or an exclusive bind (``socket(7)``). A host name that does
    not resolve is left to the engine to report.
    """
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return ""
    family, kind, proto, _name, address = infos[0]

    def bind(reuse: bool) -> int:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1 if reuse else 0)
            try:
                probe.bind(address)
            except OSError as exc:
                return exc.errno or -1
        return 0

    code = bind(False)
    if code == errno.EADDRINUSE and not port_listeners(port)[0]:
        code = bind(True)
    if code == 0:
        return ""
    if code != errno.EADDRINUSE:
        return f"port {port} on {host} cannot be bound: {os.strerror(code) if code > 0 else 'error'}"
    holder = port_listener_text(port)
    if holder:
        return f"port {port} on {host} is already in use by {holder}"
    # No listener: the port is the source port of a connection (one of this host's outgoing
    # connections got it from the ephemeral range) or of one still closing.
    sockets = port_socket_text(port)
    return f"port {port} on {host} is already in use" + (f": it is the local port of {sockets}" if sockets else "")
