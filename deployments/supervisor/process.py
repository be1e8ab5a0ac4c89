"""Spawning, identifying, finding and stopping engine processes.

How a process is laid out (see :mod:`deployments.supervisor.shim` for the shim's side)::

    node agent ──Popen(start_new_session)──▶ shim (session + group leader, pid == pgid == sid,
                                              child subreaper, owns the capped log)
                                               └─ engine (handle.pid; exec'd argv, maybe numactl)
                                                    └─ workers, helpers ... (inherit the tag)

Every process gets ``CEILING_PROC_ID=<tag>`` in its environment. Identity is (pid, start
ticks), checked immediately before every signal through a pidfd so that a reused pid is never
signalled. Descendants are found from any process of the same user, which is what a restarted
node agent needs, as the union of:

* the parent-link subtree of the engine and of the shim (the shim is a subreaper, so orphans
  whose parent died are reparented to it, not to init);
* the members of the shim's process group, once one of them is seen carrying the tag;
* every process whose ``/proc/<pid>/environ`` carries the tag, which finds a descendant that
  called ``setsid`` *and* lost its parent *and* outlived the shim.

A process that both cleared its environment and escaped the shim's tree and group cannot be
attributed to a deployment by any of these; that is accepted, since it takes deliberate effort.
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deployments.supervisor.procfs import (
    TAG_ENV,
    ProcInfo,
    proc_has_tag,
    proc_scan,
    proc_stat,
    proc_subtree,
    proc_tagged,
)

SHIM_PATH = Path(__file__).with_name("shim.py")
BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "TMPDIR")
"""Variables copied from the agent's own environment; everything else comes from the spec."""
MIN_LOG_BYTES = 1024
# Mode of a log directory this module creates: owner only, like the log files the shim writes (0600).
LOG_DIR_MODE = 0o700
POLL_S = 0.05
# A stop signal the shim recorded more than this before this call's own SIGTERM was sent by an
# earlier stop; the shim notes ours within milliseconds (its signal handler runs at once).
EARLIER_STOP_SLACK_S = 0.5
_TAG_RE = re.compile(r"^[A-Za-z0-9._-]{8,128}$")
# Shims started by this process, kept so they can be reaped (a dropped Popen that is still
# running makes Python warn, and an unreaped one lingers as a zombie).
_SHIMS: dict[int, subprocess.Popen] = {}


class SpawnError(RuntimeError):
    """The process could not be started: bad argv or env, missing executable, exec failure,
    bad CPU list for ``sched_setaffinity``, or the shim did not report within the timeout."""


@dataclass(frozen=True)
class ProcessHandle:
    """Identity of one spawned process: ``pid`` plus ``start_ticks`` (``/proc/<pid>/stat``
    field 22), its process group and session (both the shim's pid), and the environment tag
    its descendants inherit. A handle whose start ticks no longer match names a different
    process, which is never signalled."""

    pid: int
    start_ticks: int
    pgid: int
    sid: int
    tag: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (ints and the tag string)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ProcessHandle":
        """Inverse of :meth:`to_dict`; raises ``KeyError``/``ValueError`` on missing or bad fields."""
        return cls(
            pid=int(data["pid"]),
            start_ticks=int(data["start_ticks"]),
            pgid=int(data["pgid"]),
            sid=int(data["sid"]),
            tag=str(data["tag"]),
        )


@dataclass(frozen=True)
class ExitInfo:
    """How the engine process ended, as recorded by its shim: ``returncode`` for a normal exit,
    ``signal`` (number) when a signal ended it, ``ended_at`` in seconds since the epoch.
    ``stop_signal`` / ``stop_signal_at`` (number, epoch seconds): the first stop signal (SIGTERM,
    SIGINT, SIGHUP) sent to the engine's process group before it ended, as :func:`process_stop`
    sends it; None when none was (the engine ended on its own, or a signal reached its pid alone).
    """

    pid: int
    start_ticks: int | None
    returncode: int | None
    signal: int | None
    ended_at: float
    stop_signal: int | None = None
    stop_signal_at: float | None = None

    @property
    def requested(self) -> bool:
        """The engine ended after a stop was sent to its process group: it was asked to stop."""
        return self.stop_signal is not None

    @property
    def ended_after_s(self) -> float | None:
        """Seconds from the stop signal to the engine's end (None when not :attr:`requested`)."""
        if self.stop_signal_at is None:
            return None
        return max(0.0, self.ended_at - self.stop_signal_at)


@dataclass(frozen=True)
class StopResult:
    """What :func:`process_stop` did and saw.

    ``outcome``: ``exited`` (the engine had already ended before any signal), ``terminated``
    (SIGTERM sufficed), ``killed`` (some process of the tree needed SIGKILL), ``not_running``
    (nothing of it was found), ``identity_mismatch`` (the pid now belongs to another process,
    which was not signalled; tagged leftovers, if any, were still stopped). ``exit_code`` and
    ``signal`` come from the shim's exit record when ``log_path`` was given: how the engine's
    process ended, whoever asked (``exit_code`` 0 after a SIGTERM is a clean shutdown on request,
    not an exit of its own). Pid tuples list what received SIGTERM, what needed SIGKILL, and
    anything still alive at the end.

    ``requested`` is True when this stop ended a running engine (``terminated`` or ``killed``):
    ``stop_signal`` is the signal sent first (SIGTERM) and ``ended_after_s`` the seconds from it
    to the engine's end (from the exit record, else as polled). ``reason`` says it in words: a
    requested stop reads ``stopped on request: SIGTERM, ended 0.42 s after it (exit code 0)``
    (or ``... (killed by signal 15 (SIGTERM))``, ``...; SIGKILL needed after 5s grace for pids
    [...]``), never ``exited with code N``, which is only for an engine that ended on its own
    (:func:`exit_info_text`).
    """

    outcome: str
    duration_s: float
    exit_code: int | None = None
    signal: int | None = None
    terminated: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()
    survivors: tuple[int, ...] = ()
    reason: str = ""
    requested: bool = False
    stop_signal: int | None = None
    ended_after_s: float | None = None


@dataclass
class _Tree:
    engine: ProcInfo | None  # None unless the handle's pid still has its start ticks
    members: dict[int, ProcInfo] = field(default_factory=dict)  # engine + descendants, no shim
    shim: ProcInfo | None = None
    group_verified: bool = False


def new_tag() -> str:
    """A fresh random tag (32 hex digits) for :func:`process_spawn`."""
    return uuid.uuid4().hex


def exit_file_for(log_path: Path | str) -> Path:
    """Where the shim records the exit of the process logging to ``log_path``."""
    return Path(f"{log_path}.exit")


def _get(spec: Any, name: str, default: Any = None) -> Any:
    if isinstance(spec, Mapping):
        return spec.get(name, default)
    return getattr(spec, name, default)


def _resolve(program: str, path_var: str) -> str:
    if os.path.isabs(program):
        resolved: str | None = program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    else:
        resolved = shutil.which(program, path=path_var)
    if not resolved:
        raise SpawnError(f"executable {program!r} not found or not executable (PATH={path_var})")
    return resolved


def _check_allowed(program: str, resolved: str, allowed: Collection[str]) -> None:
    """Refuse ``resolved`` (``program`` as found on ``PATH``) unless it is one of ``allowed``,
    each resolved on the caller's own ``PATH`` (never the spawn environment's)."""
    own_path = os.environ.get("PATH", os.defpath)
    paths = set()
    for entry in allowed:
        if os.path.isabs(entry):
            paths.add(os.path.normpath(entry))
        elif (found := shutil.which(entry, path=own_path)):
            paths.add(os.path.normpath(found))
    if os.path.normpath(resolved) not in paths:
        raise SpawnError(f"refused to run {program!r}: not an executable of this host's configuration "
                         f"(allowed: {', '.join(sorted(paths)) or 'none'})")


def _check_env(env: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise SpawnError(f"bad environment variable name {key!r}")
        if not isinstance(value, str) or "\0" in value:
            # The value itself is never echoed: it may be a secret.
            raise SpawnError(f"environment variable {key} must be a string without NUL bytes")
        out[key] = value
    return out


def _reap_shims() -> None:
    for pid, popen in list(_SHIMS.items()):
        if popen.poll() is not None:
            _SHIMS.pop(pid, None)


def process_spawn(
    *,
    spec: Any,
    log_path: Path,
    log_max_bytes: int,
    tag: str,
    extra_env: Mapping[str, str] | None = None,
    start_timeout_s: float = 10.0,
    allowed_executables: Collection[str] | None = None,
) -> ProcessHandle:
    """Start ``spec.argv`` detached and return its :class:`ProcessHandle`.

    ``spec`` is any object or dict with ``argv`` (list of str), ``env`` (dict, secrets
    included), ``pin_method`` (``numactl`` | ``sched_setaffinity`` | ``none``) and ``cpus``
    (kernel cpulist). The process runs under the shim (own session and process group, so it
    outlives the caller), stdin from ``/dev/null``, stdout and stderr into ``log_path`` capped
    at ``log_max_bytes`` bytes per file (one ``.1`` predecessor kept; files mode 0600, and a
    directory created for them 0700: they hold the output unmasked), exit recorded in
    :func:`exit_file_for`. Its environment is ``PATH``, ``HOME``, ``LANG``, ``TMPDIR`` from the
    caller, then ``spec.env``, then ``extra_env``, then ``CEILING_PROC_ID=tag``.

    With ``pin_method == "numactl"`` the argv is expected to start with ``numactl ... --``
    (the launch plan puts it there); with ``sched_setaffinity`` the CPU list is applied in the
    child before exec. Both the program and, behind numactl, the wrapped program are resolved
    on ``PATH`` and must exist; ``numactl`` as the method without numactl in front is refused.
    With ``allowed_executables`` (paths or names, resolved on the caller's own ``PATH``) both
    must also be one of them, and numactl must mark the program it runs with ``--``; a refused
    argv starts nothing. Returns once the exec has happened. Raises :class:`SpawnError`.
    """
    argv = list(_get(spec, "argv") or [])
    if not argv or not all(isinstance(a, str) and a and "\0" not in a for a in argv):
        raise SpawnError("argv must be a non-empty list of non-empty strings")
    if not _TAG_RE.match(tag or ""):
        raise SpawnError("tag must be 8-128 characters of letters, digits, '.', '_' or '-'")
    if log_max_bytes < MIN_LOG_BYTES:
        raise SpawnError(f"log_max_bytes must be at least {MIN_LOG_BYTES}")

    env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
    env.update(_check_env(_get(spec, "env") or {}))
    env.update(_check_env(extra_env or {}))
    env[TAG_ENV] = tag
    path_var = env.get("PATH", os.defpath)
    program = argv[0]
    argv[0] = _resolve(program, path_var)
    if allowed_executables is not None:
        _check_allowed(program, argv[0], allowed_executables)
    pin_method = _get(spec, "pin_method") or "none"
    if pin_method == "numactl" and os.path.basename(argv[0]) != "numactl":
        # Running it anyway would start the engine unpinned while the row claims otherwise.
        raise SpawnError("pin_method is numactl but argv does not start with numactl")
    if os.path.basename(argv[0]) == "numactl":
        if "--" in argv:
            wrapped = argv.index("--") + 1
            if wrapped >= len(argv):
                raise SpawnError("numactl argv has nothing after '--'")
            resolved = _resolve(argv[wrapped], path_var)
            if allowed_executables is not None:
                _check_allowed(argv[wrapped], resolved, allowed_executables)
        elif allowed_executables is not None:
            raise SpawnError("refused to run numactl without '--' before the program it runs")

    log_path = Path(log_path)
    cpus = str(_get(spec, "cpus") or "").strip()
    shim_args = [
        sys.executable, "-I", "-S", str(SHIM_PATH),
        "--log", str(log_path),
        "--max-bytes", str(int(log_max_bytes)),
        "--exit-file", str(exit_file_for(log_path)),
    ]
    if pin_method == "sched_setaffinity" and cpus:
        shim_args += ["--cpus", cpus]

    log_path.parent.mkdir(mode=LOG_DIR_MODE, parents=True, exist_ok=True)
    exit_file_for(log_path).unlink(missing_ok=True)
    _reap_shims()
    report_r, report_w = os.pipe()
    try:
        try:
            popen = subprocess.Popen(
                [*shim_args, "--report-fd", str(report_w), "--", *argv],
                start_new_session=True,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(report_w,),
            )
        finally:
            os.close(report_w)
        _SHIMS[popen.pid] = popen
        line = _read_report(report_r, start_timeout_s)
    finally:
        os.close(report_r)

    if not line.startswith("ok "):
        if not line:
            # No report in time: whatever did start must not run unsupervised.
            for found in process_find_by_tag(tag):
                _signal_exact(found.pid, found.start_ticks, signal.SIGKILL)
        popen.wait(timeout=5)
        _SHIMS.pop(popen.pid, None)
        detail = line[3:] if line.startswith("err ") else f"no start report within {start_timeout_s}s"
        raise SpawnError(f"could not start {argv[0]}: {detail}")
    _, pid_s, ticks_s = line.split()
    return ProcessHandle(pid=int(pid_s), start_ticks=int(ticks_s), pgid=popen.pid, sid=popen.pid, tag=tag)


def _read_report(fd: int, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def handle_alive(handle: ProcessHandle) -> bool:
    """True when ``handle.pid`` exists, has ``handle.start_ticks`` and is not a zombie."""
    info = proc_stat(handle.pid)
    return info is not None and info.start_ticks == handle.start_ticks and info.running


def process_identity(handle: ProcessHandle) -> str:
    """Classify the handle against ``/proc``: ``running`` (same process, alive, and carrying
    the tag, so it may be adopted), ``zombie`` (ended, not yet reaped), ``gone`` (no such pid),
    or ``mismatch`` (the pid is another process now, or has lost the tag)."""
    info = proc_stat(handle.pid)
    if info is None:
        return "gone"
    if info.start_ticks != handle.start_ticks:
        return "mismatch"
    if not info.running:
        return "zombie"
    return "running" if proc_has_tag(handle.pid, handle.tag) else "mismatch"


def _tree(handle: ProcessHandle, table: dict[int, ProcInfo] | None = None) -> _Tree:
    table = proc_scan() if table is None else table
    engine = table.get(handle.pid)
    if engine is not None and engine.start_ticks != handle.start_ticks:
        engine = None
    shim = table.get(handle.pgid)
    # The shim is the group leader and carries the tag; a reused pgid would not.
    if shim is not None and not (shim.pgid == shim.pid and proc_has_tag(shim.pid, handle.tag)):
        shim = None
    tagged = proc_tagged(handle.tag, table)
    pids: set[int] = set(tagged)
    if engine is not None:
        pids.add(engine.pid)
        pids |= proc_subtree(engine.pid, table)
    if shim is not None:
        pids |= proc_subtree(shim.pid, table)
    group_verified = any(table[p].pgid == handle.pgid for p in tagged if p in table)
    if group_verified:
        pids |= {p for p, info in table.items() if info.pgid == handle.pgid}
    pids.discard(handle.pgid)
    if engine is None:
        pids.discard(handle.pid)  # a reused pid is never ours, whatever else matches
    members = {p: table[p] for p in pids if p in table and table[p].running}
    return _Tree(engine=engine, members=members, shim=shim, group_verified=group_verified)


def process_descendants(handle: ProcessHandle) -> list[ProcessHandle]:
    """Live descendants of the engine process (not the engine, not the shim), sorted by pid,
    found by parent links, process group and environment tag (see the module docstring).
    Each comes back as a handle with its own pid, start ticks, group and session; ``tag`` is
    the parent's tag when the process carries it, else ""."""
    tree = _tree(handle)
    out = []
    for pid in sorted(tree.members):
        if pid == handle.pid:
            continue
        info = tree.members[pid]
        out.append(ProcessHandle(
            pid=pid, start_ticks=info.start_ticks, pgid=info.pgid, sid=info.sid,
            tag=handle.tag if proc_has_tag(pid, handle.tag) else "",
        ))
    return out


def process_find_by_tag(tag: str) -> list[ProcessHandle]:
    """Every live process carrying ``tag``, shim included, sorted by pid. Lets a reconcile find
    processes whose row never got a pid (e.g. the agent died right after spawning)."""
    table = proc_scan()
    return [
        ProcessHandle(pid=p, start_ticks=table[p].start_ticks, pgid=table[p].pgid, sid=table[p].sid, tag=tag)
        for p in sorted(proc_tagged(tag, table))
    ]


def _signal_exact(pid: int, start_ticks: int, sig: int) -> bool:
    """Send ``sig`` to ``pid`` only if it still has ``start_ticks``; True when sent.

    The pidfd is opened first and the identity checked after: from then on the fd names that
    very process, so a pid reused between the check and the signal cannot be hit.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:
        fd = -1  # kernel without pidfd (< 5.3): fall back to a check-then-kill
    try:
        info = proc_stat(pid)
        if info is None or info.start_ticks != start_ticks:
            return False
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def signal_text(number: int) -> str:
    """``signal 9 (SIGKILL)``: a signal number with its name from :mod:`signal`, or the number
    alone for one Linux does not name (real-time signals, for instance)."""
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def exit_status_text(*, returncode: int | None, signal_number: int | None) -> str:
    """How a process ended, from its wait status (``waitpid(2)``: ``WTERMSIG`` when a signal
    ended it, else ``WEXITSTATUS``) as the shim records it: ``killed by signal 9 (SIGKILL)``,
    ``exited with code 3``, or ``ended (no exit status)`` when neither is known."""
    if signal_number is not None:
        return f"killed by {signal_text(int(signal_number))}"
    if returncode is not None:
        return f"exited with code {int(returncode)}"
    return "ended (no exit status)"


def exit_info_text(info: ExitInfo) -> str:
    """How the engine of ``info`` ended, in words that say who asked: ``stopped on request:
    SIGTERM, ended 0.42 s after it (exit code 0)`` (or ``(killed by signal 15 (SIGTERM))``)
    when a stop was sent to its group first (:attr:`ExitInfo.requested`), else
    :func:`exit_status_text` (``exited with code 0``, ``killed by signal 9 (SIGKILL)``)."""
    how = exit_status_text(returncode=info.returncode, signal_number=info.signal)
    if not info.requested:
        return how
    return _requested_text(int(info.stop_signal), info.ended_after_s, how)


def _requested_text(stop_signal: int, ended_after_s: float | None, how: str) -> str:
    """``stopped on request: SIGTERM, ended 0.42 s after it (exit code 0)``: ``how`` is
    :func:`exit_status_text` of the end (``exited with code N`` becomes ``exit code N`` here, an
    answer to the request rather than an exit of its own)."""
    try:
        name = signal.Signals(stop_signal).name
    except ValueError:
        name = f"signal {stop_signal}"
    if how.startswith("exited with code "):
        how = "exit code " + how[len("exited with code "):]
    after = f", ended {ended_after_s:.2f} s after it" if ended_after_s is not None else ""
    return f"stopped on request: {name}{after} ({how})"


def returncode_text(code: int) -> str:
    """:func:`exit_status_text` of a code stored the way :mod:`subprocess` reports it: ``-N``
    when signal N ended the process, else its exit code."""
    if code < 0:
        return exit_status_text(returncode=None, signal_number=-code)
    return exit_status_text(returncode=code, signal_number=None)


def shim_running(handle: ProcessHandle) -> bool:
    """True while a process leading the handle's group and session (the shim's place) runs.
    Only a hint (a reused pid would pass): :func:`shim_gone` is the check that counts."""
    info = proc_stat(handle.pgid)
    return info is not None and info.running and info.pid == info.pgid == info.sid


def shim_gone(handle: ProcessHandle) -> str | None:
    """None while the shim still supervises the engine; else how it ended, in words.

    The engine is the shim's own child (forked, then exec'd), so the shim runs exactly as long
    as the engine's parent is the group leader ``handle.pgid``: once the shim dies the kernel
    reparents the engine to the nearest subreaper or init. This reads one ``/proc/<pid>/stat``
    and cannot be fooled by a reused shim pid. None too when the engine itself no longer runs
    (its exit is the news then). For a shim this process started, the text is its exit status
    (``killed by signal 9 (SIGKILL)``, reaping it); for one a previous agent started the
    status went to whoever reaped it and the text is ``""``.
    """
    engine = proc_stat(handle.pid)
    if engine is None or engine.start_ticks != handle.start_ticks or not engine.running:
        return None
    if engine.ppid == handle.pgid:
        return None
    popen = _SHIMS.get(handle.pgid)
    code = popen.poll() if popen is not None else None
    return returncode_text(code) if code is not None else ""


def _killpg_verified(handle: ProcessHandle, sig: int) -> bool:
    # Re-check right before signalling: only a group that still has a tagged member is ours.
    table = {p: i for p, i in proc_scan().items() if i.pgid == handle.pgid}
    if not any(i.running and proc_has_tag(p, handle.tag) for p, i in table.items()):
        return False
    try:
        os.killpg(handle.pgid, sig)
        return True
    except ProcessLookupError:
        return False


def _reap(pgid: int) -> None:
    popen = _SHIMS.get(pgid)
    if popen is not None:
        if popen.poll() is not None:
            _SHIMS.pop(pgid, None)
        return
    info = proc_stat(pgid)
    if info is not None and info.ppid == os.getpid():
        try:
            os.waitpid(pgid, os.WNOHANG)
        except ChildProcessError:
            pass


def process_exit_info(handle: ProcessHandle, *, log_path: Path | str) -> ExitInfo | None:
    """The shim's exit record for this handle's process, or None when there is none yet or it
    belongs to another process (a previous run that used the same log path)."""
    try:
        data = json.loads(exit_file_for(log_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("pid") != handle.pid or data.get("start_ticks") not in (handle.start_ticks, None):
        return None
    stop_signal, stop_at = data.get("stop_signal"), data.get("stop_signal_at")
    return ExitInfo(
        pid=int(data["pid"]),
        start_ticks=data.get("start_ticks"),
        returncode=data.get("returncode"),
        signal=data.get("signal"),
        ended_at=float(data.get("ended_at") or 0.0),
        stop_signal=int(stop_signal) if stop_signal is not None else None,
        stop_signal_at=float(stop_at) if stop_signal is not None and stop_at is not None else None,
    )


def _earlier_stop_at(handle: ProcessHandle, log_path: Path | str | None) -> float | None:
    """When the first stop signal reached this handle's engine group (epoch seconds), from the
    shim's ``<exit-file>.stop`` record (see :mod:`deployments.supervisor.shim`), or None when
    there is none for this (pid, start ticks): no stop was sent to it before."""
    if not log_path:
        return None
    try:
        data = json.loads(Path(f"{exit_file_for(log_path)}.stop").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("pid") != handle.pid or data.get("start_ticks") not in (handle.start_ticks, None):
        return None
    at = data.get("stop_signal_at")
    return float(at) if at is not None else None


def _clock(epoch_s: float) -> str:
    """``13:28:03`` (local time) of an epoch time."""
    return time.strftime("%H:%M:%S", time.localtime(epoch_s))


def process_stop(
    handle: ProcessHandle,
    *,
    grace_s: float,
    log_path: Path | str | None = None,
    kill_wait_s: float = 5.0,
    shim_wait_s: float = 2.0,
) -> StopResult:
    """Stop the process and everything descended from it; never signals a reused pid.

    SIGTERM goes to the shim's process group (once a tagged member proves the group is ours;
    the shim ignores it so it can record the exit) and, by exact identity, to every tree member
    outside it; members appearing during the grace period get it too. After ``grace_s`` seconds
    (the recipe's grace period) whatever is left gets SIGKILL, retried for up to ``kill_wait_s``.
    The shim is then given ``shim_wait_s`` to flush the log and exit, else killed, and reaped
    when it is this process's child. Blocks for at most about
    ``grace_s + kill_wait_s + shim_wait_s``. See :class:`StopResult` for the outcome rules.
    """
    started = time.monotonic()
    first = proc_stat(handle.pid)
    mismatch = first is not None and first.start_ticks != handle.start_ticks
    tree = _tree(handle)
    engine_was_running = tree.engine is not None and tree.engine.running
    had_members = bool(tree.members)
    terminated: set[int] = set()
    killed: set[int] = set()
    term_wall: float | None = None  # time.time() of the first SIGTERM
    gone_after: float | None = None  # seconds from it until the engine was seen ended

    def note_gone(t: _Tree) -> None:
        nonlocal gone_after
        if gone_after is None and term_wall is not None and (t.engine is None or not t.engine.running):
            gone_after = time.time() - term_wall

    def term_new(members: dict[int, ProcInfo], in_group_done: bool) -> None:
        for pid, info in members.items():
            if pid in terminated:
                continue
            if in_group_done and info.pgid == handle.pgid:
                terminated.add(pid)  # already reached by killpg
            elif _signal_exact(pid, info.start_ticks, signal.SIGTERM):
                terminated.add(pid)

    # A stop that an earlier caller began (an agent that died during the grace period) goes on
    # from its first SIGTERM: the engine has had that much of its grace already.
    earlier_at = _earlier_stop_at(handle, log_path) if tree.members else None
    if tree.members:
        term_wall, term_mono = time.time(), time.monotonic()
        group_done = tree.group_verified and _killpg_verified(handle, signal.SIGTERM)
        term_new(tree.members, group_done)
        used = max(0.0, term_wall - earlier_at) if earlier_at is not None else 0.0
        # The grace counts from the SIGTERM, not from this call's start (reading the tree first
        # can take a while on a loaded host), so the engine gets all of it.
        deadline = term_mono + max(0.0, grace_s - used)
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            tree = _tree(handle)
            note_gone(tree)
            if not tree.members:
                break
            term_new(tree.members, False)
        kill_deadline = time.monotonic() + kill_wait_s
        while tree.members and time.monotonic() < kill_deadline:
            for pid, info in tree.members.items():
                if _signal_exact(pid, info.start_ticks, signal.SIGKILL):
                    killed.add(pid)
            time.sleep(POLL_S)
            tree = _tree(handle)
            note_gone(tree)
    survivors = tuple(sorted(tree.members))

    shim_deadline = time.monotonic() + shim_wait_s
    while tree.shim is not None and tree.shim.running and time.monotonic() < shim_deadline:
        _reap(handle.pgid)
        time.sleep(POLL_S)
        tree = _tree(handle)
    if tree.shim is not None and tree.shim.running:
        _signal_exact(tree.shim.pid, tree.shim.start_ticks, signal.SIGKILL)
        time.sleep(POLL_S)
    _reap(handle.pgid)

    exit_info = process_exit_info(handle, log_path=log_path) if log_path else None
    # An engine whose shim recorded its end before the first SIGTERM ended on its own, whatever
    # this call then saw (it was running when the tree was read a moment earlier).
    ended_first = (exit_info is not None and term_wall is not None and not exit_info.requested
                   and 0 < exit_info.ended_at < term_wall)
    if mismatch:
        outcome = "identity_mismatch"
    elif engine_was_running and not ended_first:
        outcome = "killed" if killed else "terminated"
    elif had_members or exit_info is not None or (first is not None and not first.running):
        outcome = "exited"
    else:
        outcome = "not_running"
    requested = outcome in ("terminated", "killed") and term_wall is not None
    ended_after = None
    # The first SIGTERM the engine's group received: the shim's record of it (exit record, or
    # the stop record written while it ran), when it predates this call's own by more than the
    # shim's reaction time; this call's otherwise.
    first_at = term_wall
    if term_wall is not None:
        recorded = exit_info.stop_signal_at if exit_info is not None and exit_info.stop_signal_at else earlier_at
        if recorded is not None and recorded < term_wall - EARLIER_STOP_SLACK_S:
            first_at = recorded
    resumed = first_at is not None and first_at != term_wall
    if requested:
        # The shim's record times the end exactly; polling only bounds it (POLL_S).
        if exit_info is not None and exit_info.ended_at:
            ended_after = max(0.0, exit_info.ended_at - first_at)
        elif gone_after is not None:
            ended_after = gone_after + (term_wall - first_at)
        how = (exit_status_text(returncode=exit_info.returncode, signal_number=exit_info.signal)
               if exit_info is not None else "no exit record")
        stopped = _requested_text(int(signal.SIGTERM), ended_after, how)
        if resumed:
            stopped = stopped.replace(
                "SIGTERM, ended", f"SIGTERM first sent at {_clock(first_at)} by an earlier stop "
                f"(again at {_clock(term_wall)}), ended", 1).replace(" s after it ", " s after the first ", 1)
    else:
        stopped = ""
    grace_text = (f"{grace_s:g}s grace from the first SIGTERM at {_clock(first_at)}" if resumed
                  else f"{grace_s:g}s grace")
    reason = {
        "identity_mismatch": f"pid {handle.pid} now belongs to another process; it was not signalled",
        "killed": f"{stopped}; SIGKILL needed after {grace_text} for pids {sorted(killed)}",
        "terminated": stopped,
        "exited": "had already exited before the stop" + (
            f" ({exit_status_text(returncode=exit_info.returncode, signal_number=exit_info.signal)})"
            if exit_info is not None and not exit_info.requested else ""),
        "not_running": "no process found",
    }[outcome]
    if survivors:
        reason += f"; still alive after SIGKILL: {list(survivors)}"
    return StopResult(
        outcome=outcome,
        duration_s=time.monotonic() - started,
        exit_code=exit_info.returncode if exit_info else None,
        signal=exit_info.signal if exit_info else None,
        terminated=tuple(sorted(terminated)),
        killed=tuple(sorted(killed)),
        survivors=survivors,
        reason=reason,
        requested=requested,
        stop_signal=int(signal.SIGTERM) if requested else None,
        ended_after_s=ended_after,
    )
