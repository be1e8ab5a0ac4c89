"""Verifying where a spawned process actually runs: CPUs, memory nodes and GPUs.

CPU binding is read from ``Cpus_allowed_list`` in ``/proc/<pid>/status``. Memory binding needs
two sources: ``Mems_allowed_list`` is the cpuset's node list and does *not* change under
``numactl --membind`` (that sets the task's memory policy instead), so the policy is read from
the first line of ``/proc/<pid>/numa_maps`` (``bind:0``, ``interleave:0-1``, ``default``...).
The effective memory nodes are the policy's nodes for ``bind`` and ``interleave``, else the
cpuset's list. Both raw values are kept so the row can show them.

GPU placement is checked against NVML's per-process list (``nvmlDeviceGetComputeRunningProcesses``)
through ``nvidia-ml-py``. NVML reports pids of the host's pid namespace; inside a container
without the host pid namespace those pids do not match ``/proc`` and the check reports the GPUs
as missing the process, which the reason then says.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from deployments.supervisor import ProcessHandle, handle_alive, process_descendants
from deployments.supervisor.procfs import proc_exe_name
from deployments.topology import format_cpulist, parse_cpulist

EXEC_WAIT_S = 5.0
#: At most this many threads of one process are read per call of :func:`thread_bindings`; a
#: process with more is covered over several calls (``start`` rotates through its threads).
THREADS_PER_CHECK = 512
_POLICY_RE = re.compile(
    r"^\S+\s+(weighted interleave|prefer \(many\)|default|local|prefer|bind|interleave)"
    r"(?:=[a-z|]+)?(?::([0-9,\-]+))?(?:\s|$)"
)


@dataclass(frozen=True)
class EffectiveBinding:
    """Where one process may run: ``cpus`` (cpulist of ``Cpus_allowed_list``), ``mems``
    (effective memory nodes, cpulist syntax), ``mems_allowed`` (the cpuset's
    ``Mems_allowed_list``) and ``mem_policy`` (e.g. ``bind:0``; "" when unreadable)."""

    cpus: str
    mems: str
    mems_allowed: str = ""
    mem_policy: str = ""


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`pinning_verify`: ``ok``; ``effective`` binding of the main process
    (None when it is not running); ``per_pid`` binding of it and each descendant read; and
    ``reason`` naming each offending pid with expected and effective values ("" when ok)."""

    ok: bool
    effective: EffectiveBinding | None
    per_pid: dict[int, EffectiveBinding] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True)
class GpuVerifyResult:
    """Outcome of :func:`gpu_verify`: ``ok`` is None when NVML is unavailable (nothing could be
    checked); ``per_gpu`` maps GPU index → pids of this process tree seen on it."""

    ok: bool | None
    per_gpu: dict[int, list[int]] = field(default_factory=dict)
    reason: str = ""


def _status_field(text: str, name: str) -> str:
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def _raw_field(status: bytes, key: bytes) -> str:
    """The value after ``key`` (``b"\\nName:"``) up to the end of its line, or ""."""
    at = status.find(key)
    if at < 0:
        return ""
    end = status.find(b"\n", at + len(key))
    return status[at + len(key):end if end >= 0 else None].strip().decode("ascii", "replace")


def _mem_policy(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/numa_maps", encoding="ascii", errors="replace") as fh:
            first = fh.readline()
    except OSError:
        return ""  # kernel without NUMA support, or not ours to read
    match = _POLICY_RE.match(first)
    if not match:
        return ""
    return f"{match.group(1)}:{match.group(2)}" if match.group(2) else match.group(1)


def pinning_status_read(pid: int) -> tuple[str, str]:
    """``(Cpus_allowed_list, Mems_allowed_list)`` of ``pid`` as the kernel writes them: one read
    of ``/proc/<pid>/status``, the cheap part of :func:`pinning_read` (which adds the memory
    policy from ``numa_maps``). A periodic check compares these raw values to tell whether the
    binding can have changed. Raises ``ProcessLookupError`` when the process does not exist."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            status = fh.read()
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ProcessLookupError(pid) from exc
    return _status_field(status, "Cpus_allowed_list"), _status_field(status, "Mems_allowed_list")


@dataclass(frozen=True)
class ThreadBindings:
    """The ``(Cpus_allowed_list, Mems_allowed_list)`` of threads of one process, as
    :func:`thread_bindings` read them: ``per_tid`` maps thread id → the two raw lists;
    ``total`` is how many threads the process had when listed, ``next_start`` where the next
    call should start when only part of them was read (0 once all were covered); ``tids``
    every thread id listed."""

    per_tid: dict[int, tuple[str, str]]
    total: int
    next_start: int = 0
    tids: tuple[int, ...] = ()


def thread_bindings(pid: int, *, start: int = 0, limit: int = THREADS_PER_CHECK) -> ThreadBindings:
    """Read ``Cpus_allowed_list`` and ``Mems_allowed_list`` of each thread of ``pid`` from
    ``/proc/<pid>/task/<tid>/status``.

    Affinity is per thread (``sched_setaffinity(2)`` and ``taskset -p`` act on one thread id),
    and engines set it per thread themselves, so the main thread's status alone does not say
    where the process runs. Threads are taken in tid order from index ``start`` (wrapping), at
    most ``limit`` per call, which bounds the cost: one ``status`` read costs about 9-15 µs
    (measured on the 2-core test host: 300 threads took 2.7-4.4 ms per call, so the default
    limit of 512 threads bounds a call to under 10 ms). A thread that exits
    between listing and reading is skipped. Raises ``ProcessLookupError`` when the process
    does not exist.
    """
    try:
        tids = sorted(int(entry.name) for entry in os.scandir(f"/proc/{pid}/task") if entry.name.isdigit())
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ProcessLookupError(pid) from exc
    total = len(tids)
    if total > limit:
        start %= total
        chosen = (tids + tids)[start:start + limit]
        next_start = (start + limit) % total
    else:
        chosen, next_start = tids, 0
    per_tid: dict[int, tuple[str, str]] = {}
    for tid in chosen:
        try:
            fd = os.open(f"/proc/{pid}/task/{tid}/status", os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited after the listing
        try:
            status = os.read(fd, 16384)  # about 1.5 KB; the kernel returns it in one read
        except ProcessLookupError:
            continue  # exited between open and read (ESRCH)
        finally:
            os.close(fd)
        per_tid[tid] = (_raw_field(status, b"\nCpus_allowed_list:"), _raw_field(status, b"\nMems_allowed_list:"))
    return ThreadBindings(per_tid=per_tid, total=total, next_start=next_start, tids=tuple(tids))


def thread_comm(pid: int, tid: int) -> str:
    """The name of thread ``tid`` of ``pid`` (``/proc/<pid>/task/<tid>/comm``); "" when gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def thread_drift(
    pid: int, per_tid: dict[int, tuple[str, str]], *, expected_cpus: str, main_mems_allowed: str
) -> list[str]:
    """Threads of ``pid`` placed outside the intended binding, each as ``thread 4312 (worker)
    on CPUs 1``, in tid order.

    A thread may run on a *subset* of ``expected_cpus`` (engines pin one worker thread per
    core), never on a CPU outside it. Its ``Mems_allowed_list`` (the cpuset's node list) must
    equal the main thread's ``main_mems_allowed``; a memory policy set with ``numactl`` is one
    per thread and lives in ``numa_maps``, read for the main thread only (a thread's
    ``numa_maps`` lists every mapping of the process, far too costly to read per thread).
    The main thread itself (tid == pid) is the caller's to judge exactly and is skipped here.
    """
    want = set(parse_cpulist(expected_cpus))
    main_mems = set(parse_cpulist(main_mems_allowed))
    out = []
    for tid, (cpus_raw, mems_raw) in sorted(per_tid.items()):
        if tid == pid:
            continue
        cpus = set(parse_cpulist(cpus_raw))
        mems = set(parse_cpulist(mems_raw))
        problems = []
        if not cpus or not cpus <= want:
            problems.append(f"on CPUs {format_cpulist(cpus) or '-'}")
        if main_mems and mems != main_mems:
            problems.append(f"memory nodes allowed {format_cpulist(mems) or '-'}")
        if problems:
            out.append(f"thread {tid} ({thread_comm(pid, tid) or '?'}) " + ", ".join(problems))
    return out


def pinning_read(pid: int) -> EffectiveBinding:
    """Read the effective CPU and memory binding of ``pid`` from ``/proc``.

    Raises ``ProcessLookupError`` when the process does not exist.
    """
    cpus_allowed, mems_allowed_raw = pinning_status_read(pid)
    cpus = format_cpulist(parse_cpulist(cpus_allowed))
    mems_allowed = format_cpulist(parse_cpulist(mems_allowed_raw))
    policy = _mem_policy(pid)
    name, _, nodes = policy.partition(":")
    mems = nodes if nodes and name in ("bind", "interleave", "weighted interleave") else mems_allowed
    return EffectiveBinding(
        cpus=cpus, mems=format_cpulist(parse_cpulist(mems)), mems_allowed=mems_allowed, mem_policy=policy
    )


def _wait_past_numactl(pid: int, timeout_s: float) -> bool:
    """``numactl`` binds itself and then execs the engine under the same pid; its own binding
    is only final once the exec happened. True when the process no longer runs numactl."""
    deadline = time.monotonic() + timeout_s
    while True:
        name = proc_exe_name(pid)
        if name != "numactl":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def pinning_verify(
    handle: ProcessHandle,
    *,
    expected_cpus: str,
    expected_mems: str | None,
    exec_wait_s: float = EXEC_WAIT_S,
    strict_descendants: bool = False,
) -> VerifyResult:
    """Check the process and every descendant against the recipe's binding.

    ``expected_cpus`` and ``expected_mems`` are cpulists; ``expected_mems=None`` skips the
    memory check (the ``sched_setaffinity`` method cannot bind memory). The main process must
    match exactly. Descendants must stay *within* the expected sets unless
    ``strict_descendants``: engines commonly narrow a worker to a subset (one core per
    scheduler), which is still on the intended NUMA node. Every thread of each of them
    (:func:`thread_bindings`, at most :data:`THREADS_PER_CHECK` per process) must stay within
    the expected CPUs too (:func:`thread_drift`). Waits up to ``exec_wait_s`` for a
    ``numactl`` wrapper to exec the engine. A point-in-time check: workers started later are
    seen only by a later call. Never raises for a vanished process; it is reported instead.
    """
    want_cpus = set(parse_cpulist(expected_cpus))
    want_mems = set(parse_cpulist(expected_mems)) if expected_mems is not None else None
    if not handle_alive(handle):
        return VerifyResult(ok=False, effective=None, reason=f"pid {handle.pid} is not running")
    if not _wait_past_numactl(handle.pid, exec_wait_s):
        return VerifyResult(
            ok=False, effective=None,
            reason=f"pid {handle.pid} still runs numactl after {exec_wait_s:g}s; binding not final",
        )
    per_pid: dict[int, EffectiveBinding] = {}
    problems: list[str] = []
    for proc in [handle, *process_descendants(handle)]:
        try:
            binding = pinning_read(proc.pid)
        except ProcessLookupError:
            continue  # exited between listing and reading: nothing left to misplace
        per_pid[proc.pid] = binding
        main = proc.pid == handle.pid
        got_cpus = set(parse_cpulist(binding.cpus))
        cpus_ok = got_cpus == want_cpus if (main or strict_descendants) else bool(got_cpus) and got_cpus <= want_cpus
        mems_ok = True
        if want_mems is not None:
            got_mems = set(parse_cpulist(binding.mems))
            mems_ok = got_mems == want_mems if (main or strict_descendants) else bool(got_mems) and got_mems <= want_mems
        if not cpus_ok or not mems_ok:
            who = f"pid {proc.pid} ({proc_exe_name(proc.pid) or '?'})" + ("" if main else " descendant")
            parts = []
            if not cpus_ok:
                parts.append(f"expected CPUs {format_cpulist(want_cpus) or '-'}, effective {binding.cpus or '-'}")
            if not mems_ok:
                parts.append(
                    f"expected memory nodes {format_cpulist(want_mems or ())}, effective {binding.mems or '-'}"
                    f" (policy {binding.mem_policy or 'unknown'}, cpuset {binding.mems_allowed or '-'})"
                )
            problems.append(f"{who}: " + "; ".join(parts))
        try:
            threads = thread_bindings(proc.pid)
        except ProcessLookupError:
            continue
        strays = thread_drift(proc.pid, threads.per_tid, expected_cpus=format_cpulist(want_cpus),
                              main_mems_allowed=binding.mems_allowed)
        if strays:
            who = f"pid {proc.pid} ({proc_exe_name(proc.pid) or '?'})" + ("" if main else " descendant")
            problems.append(f"{who}: expected CPUs {format_cpulist(want_cpus) or '-'}; " + ", ".join(strays))
    main_binding = per_pid.get(handle.pid)
    if main_binding is None:
        return VerifyResult(ok=False, effective=None, per_pid=per_pid, reason=f"pid {handle.pid} exited during the check")
    return VerifyResult(ok=not problems, effective=main_binding, per_pid=per_pid, reason="; ".join(problems))


def gpu_processes_nvml(gpu_indices: Iterable[int] | None = None) -> dict[int, list[int]] | None:
    """GPU index → sorted pids with a compute context on it, from NVML; all GPUs when
    ``gpu_indices`` is None. Returns None when NVML cannot initialise (no driver, no GPU).
    Raises ``pynvml.NVMLError`` for an index that does not exist."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        indices = list(range(pynvml.nvmlDeviceGetCount())) if gpu_indices is None else list(gpu_indices)
        out: dict[int, list[int]] = {}
        for index in indices:
            device = pynvml.nvmlDeviceGetHandleByIndex(index)
            out[index] = sorted({p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(device)})
        return out
    finally:
        pynvml.nvmlShutdown()


def gpu_verify(
    handle: ProcessHandle, *, gpu_ids: Iterable[int], nvml: dict[int, list[int]] | None = None
) -> GpuVerifyResult:
    """Check that the process tree uses exactly the GPUs in ``gpu_ids`` (NVML indices).

    Fails when a tree pid holds a context on another GPU, or an expected GPU shows none of
    the tree's pids. Meant for after readiness: an engine opens its CUDA contexts while
    loading. ``nvml`` may pass a :func:`gpu_processes_nvml` result already read; ``ok`` is
    None when NVML is unavailable.
    """
    table = gpu_processes_nvml() if nvml is None else nvml
    if table is None:
        return GpuVerifyResult(ok=None, reason="NVML unavailable; GPU placement not checked")
    expected = sorted(set(int(g) for g in gpu_ids))
    ours = {handle.pid} | {d.pid for d in process_descendants(handle)}
    per_gpu = {gpu: sorted(ours.intersection(pids)) for gpu, pids in table.items()}
    stray = {gpu: pids for gpu, pids in per_gpu.items() if pids and gpu not in expected}
    missing = [gpu for gpu in expected if not per_gpu.get(gpu)]
    problems = []
    if stray:
        problems.append("on unexpected GPUs " + ", ".join(f"{g} (pids {p})" for g, p in sorted(stray.items())))
    if missing:
        note = ""
        if any(table.get(gpu) for gpu in missing):
            note = " (other pids are listed there; NVML reports host pid-namespace pids)"
        problems.append(f"no process of the tree on expected GPUs {missing}{note}")
    reason = ""
    if problems:
        reason = f"expected GPUs {expected}; " + "; ".join(problems)
    return GpuVerifyResult(ok=not problems, per_gpu=per_gpu, reason=reason)
