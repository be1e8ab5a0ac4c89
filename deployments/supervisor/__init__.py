"""Process supervisor library: spawn detached engine processes, identify them by
(pid, start ticks), find their descendants, stop them, cap their logs, decide restarts.

Pure library over Linux ``/proc`` and signals: no Django models, no database. Callers (node
agent tasks, the reconciler) store :class:`ProcessHandle` fields on ``ServerProcess`` rows and
pass them back. The design choices (shim as session leader and log owner, environment tag,
subreaper) are explained in :mod:`deployments.supervisor.process` and
:mod:`deployments.supervisor.shim`; pinning verification lives in :mod:`deployments.pinning`.

Log cap trade-off: a pipe into the shim keeps each log file at or below the cap even when the
node agent is dead, at the price of the engine's stdout breaking if someone kills the shim
alone (the node agent notices, see :func:`shim_gone`, and records it on the process); rotating an ``O_APPEND`` file from the agent's periodic check would survive that but
lets the file grow without bound while the agent is down, which is when logs matter most.
"""
from deployments.supervisor.logs import log_tail
from deployments.supervisor.procfs import TAG_ENV, proc_start_ticks
from deployments.supervisor.process import (
    LOG_DIR_MODE,
    ExitInfo,
    ProcessHandle,
    SpawnError,
    StopResult,
    exit_file_for,
    exit_info_text,
    exit_status_text,
    handle_alive,
    new_tag,
    process_descendants,
    process_exit_info,
    process_find_by_tag,
    process_identity,
    process_spawn,
    process_stop,
    returncode_text,
    shim_gone,
    shim_running,
    signal_text,
)
from deployments.supervisor.restart import RestartPolicy

__all__ = [
    "LOG_DIR_MODE",
    "TAG_ENV",
    "ExitInfo",
    "ProcessHandle",
    "RestartPolicy",
    "SpawnError",
    "StopResult",
    "exit_file_for",
    "exit_info_text",
    "exit_status_text",
    "handle_alive",
    "log_tail",
    "new_tag",
    "proc_start_ticks",
    "process_descendants",
    "process_exit_info",
    "process_find_by_tag",
    "process_identity",
    "process_spawn",
    "process_stop",
    "returncode_text",
    "shim_gone",
    "shim_running",
    "signal_text",
]
