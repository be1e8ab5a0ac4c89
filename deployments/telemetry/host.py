"""Host readings for the node sampler: CPU utilisation (whole host, per NUMA node, per pinned
CPU set), memory and load, and the CPU and RSS of each engine's process tree.

Plain Python over Linux ``/proc`` (``proc(5)``) and ``psutil``; no Django. Sources:

* ``/proc/stat`` ``cpuN`` lines: cumulative clock ticks (``USER_HZ``) per CPU in user, nice,
  system, idle, iowait, irq, softirq, steal (guest time is already inside user/nice, so it is
  not added again). Busy = all of them minus idle and iowait; utilisation of a CPU set over a
  window = Σ busy delta / Σ total delta × 100, in percent of the set (0-100). The host's figure
  is that of the set of every ``cpuN`` line of the reading (the aggregate ``cpu`` line only where
  there are none), so a NUMA node holding every CPU shows exactly the host's figure.
* ``/proc/<pid>/stat`` fields 14-15 (utime, stime, ticks), 22 (start time) and 24 (RSS, pages):
  a process tree's CPU is Σ over its pids of the tick delta / ``SC_CLK_TCK`` / seconds × 100, in
  percent of **one** core (200 = two cores busy), as ``top`` shows a process.
* memory: ``psutil.virtual_memory()``; ``used_bytes`` = total − available, the memory a new
  allocation could not get without swapping (``MemAvailable`` in ``proc(5)``).

Ticks are 10 ms, so a rate over one 0.1 s sample would be quantised to 10 % steps: every rate
here is taken over a window of at least ``min_window_s`` (0.5 s by default) of earlier readings.
"""
from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Hashable

import psutil

from deployments.supervisor.procfs import proc_scan, proc_stat, proc_subtree

#: Shortest window a utilisation or CPU rate is computed over, in seconds (see module doc).
MIN_WINDOW_S = 0.5
#: How often the members of each process tree are found again with a full ``/proc`` scan.
TREE_RESCAN_S = 5.0
#: Readings kept per window; at 20 Hz this still covers more than ``MIN_WINDOW_S``.
_HISTORY = 64

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_cpu_ticks(path: str = "/proc/stat") -> dict[int | str, tuple[int, int]]:
    """``{cpu id: (busy ticks, total ticks)}`` plus ``"all"`` for the aggregate ``cpu`` line."""
    out: dict[int | str, tuple[int, int]] = {}
    with open(path, "rb") as fh:
        for line in fh:
            if not line.startswith(b"cpu"):
                break
            fields = line.split()
            name = fields[0][3:]
            values = [int(v) for v in fields[1:9]]
            total = sum(values)
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            out["all" if not name else int(name)] = (total - idle, total)
    return out


class _Window:
    """Readings ``(t, value)`` of one quantity; :meth:`reference` is the newest reading at least
    ``min_window_s`` older than ``now`` (or the oldest one kept, when none is that old)."""

    def __init__(self, min_window_s: float) -> None:
        self.min_window_s = min_window_s
        self.items: deque[tuple[float, Any]] = deque(maxlen=_HISTORY)

    def push(self, t: float, value: Any) -> tuple[float, Any] | None:
        ref = None
        for item in reversed(self.items):
            ref = item
            if t - item[0] >= self.min_window_s:
                break
        self.items.append((t, value))
        # Drop readings older than the one needed as the next reference.
        while len(self.items) > 2 and t - self.items[1][0] >= self.min_window_s:
            self.items.popleft()
        return ref


def _pct(busy: int, total: int) -> float | None:
    return None if total <= 0 else round(100.0 * busy / total, 2)


class HostSampler:
    """CPU utilisation of the host, of each NUMA node and of arbitrary CPU sets, plus memory and
    load average.

    ``numa_cpus`` maps a NUMA node index (as a string, the key used in ``node.sample``) to its
    CPU ids, from the node's ``NumaNode`` rows. The constructor takes a first reading, so the
    first :meth:`sample` already has a window (short, but not empty).
    """

    def __init__(self, *, numa_cpus: Mapping[str, Iterable[int]], min_window_s: float = MIN_WINDOW_S,
                 stat_path: str = "/proc/stat", clock: Callable[[], float] = time.monotonic) -> None:
        self.numa_cpus = {str(k): tuple(int(c) for c in v) for k, v in numa_cpus.items()}
        self._stat_path = stat_path
        self._clock = clock
        self._window = _Window(min_window_s)
        self._window.push(clock(), read_cpu_ticks(stat_path))

    def _set_pct(self, now: dict, ref: dict, cpus: Iterable[int]) -> float | None:
        busy = total = 0
        seen = False
        for cpu in cpus:
            if cpu in now and cpu in ref:
                seen = True
                busy += now[cpu][0] - ref[cpu][0]
                total += now[cpu][1] - ref[cpu][1]
        return _pct(busy, total) if seen else None

    def sample(self, *, pinned_sets: Mapping[Hashable, Iterable[int]] | None = None
               ) -> tuple[dict[str, Any], dict[Hashable, float | None]]:
        """Read the host once. Returns ``(host, pinned)``: ``host`` is ``node.sample``'s
        ``host`` object (``cpu_pct``, ``cpu_pct_per_numa``, ``memory`` in bytes, ``loadavg``)
        and ``pinned`` maps each key of ``pinned_sets`` to the utilisation of that CPU set in
        percent (None for an empty set or CPUs this host does not have)."""
        t = self._clock()
        ticks = read_cpu_ticks(self._stat_path)
        ref_item = self._window.push(t, ticks)
        ref = ref_item[1] if ref_item else ticks
        # The host figure is summed from the same per-CPU lines as each NUMA node's, not read
        # from the aggregate ``cpu`` line: that line is the kernel's sum over every possible CPU,
        # each CPU's idle time taken a moment apart from its own line, so a NUMA node holding
        # every CPU would show another figure than the host in the same sample.
        cpus = [c for c in ticks if c != "all"]
        cpu_pct = self._set_pct(ticks, ref, cpus) if cpus else None
        if cpu_pct is None and "all" in ticks and "all" in ref:
            cpu_pct = _pct(ticks["all"][0] - ref["all"][0], ticks["all"][1] - ref["all"][1])
        per_numa = {k: self._set_pct(ticks, ref, cpus) for k, cpus in self.numa_cpus.items()}
        pinned = {k: (self._set_pct(ticks, ref, cpus) if cpus else None) for k, cpus in (pinned_sets or {}).items()}
        vm = psutil.virtual_memory()
        host = {
            "cpu_pct": cpu_pct,
            "cpu_pct_per_numa": per_numa,
            "memory": {"used_bytes": int(vm.total - vm.available), "total_bytes": int(vm.total),
                       "available_bytes": int(vm.available)},
            "loadavg": [round(x, 2) for x in os.getloadavg()],
        }
        return host, pinned


def read_pid_usage(pid: int) -> tuple[int, int, int] | None:
    """``(start ticks, utime + stime ticks, RSS bytes)`` of ``pid`` from ``/proc/<pid>/stat``;
    None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()
    if len(rest) < 22:
        return None
    # rest[0] is field 3 (state): field N is rest[N - 3].
    return int(rest[19]), int(rest[11]) + int(rest[12]), int(rest[21]) * PAGE_SIZE


class ProcessTreeSampler:
    """CPU (percent of one core) and RSS (bytes) of process trees, and which tree a pid is in.

    :meth:`sample` takes ``{key: root pid}`` (key: a ServerProcess id). Tree members (the root
    and every descendant) are found with one full ``/proc`` scan every ``rescan_s`` seconds or
    when a new root appears; in between, each member's ``/proc/<pid>/stat`` is read once per
    sample. The CPU rate sums per-pid tick deltas over pids present at both ends of the
    window (pid + start time, so a reused pid never counts), which keeps it right while
    helper processes come and go.
    """

    def __init__(self, *, rescan_s: float = TREE_RESCAN_S, min_window_s: float = MIN_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rescan_s = rescan_s
        self._min_window_s = min_window_s
        self._clock = clock
        self._members: dict[Hashable, set[int]] = {}
        self._roots: dict[Hashable, int] = {}
        self._scanned_at = float("-inf")
        self._windows: dict[Hashable, _Window] = {}

    def _rescan(self, roots: Mapping[Hashable, int]) -> None:
        table = proc_scan()
        self._members = {key: ({pid} | proc_subtree(pid, table)) if pid in table else set()
                         for key, pid in roots.items()}
        self._roots = dict(roots)
        self._scanned_at = self._clock()

    def owner_of(self, pid: int, *, max_depth: int = 64) -> Hashable | None:
        """The key whose tree holds ``pid`` (as of the last scan), else the key of the first
        root among ``pid``'s ancestors (read now from ``/proc``, for a child born since the
        scan); None when it belongs to no tree."""
        for key, members in self._members.items():
            if pid in members:
                return key
        by_root = {root: key for key, root in self._roots.items()}
        current = pid
        for _ in range(max_depth):
            if current in by_root:
                return by_root[current]
            info = proc_stat(current)
            if info is None or info.ppid <= 1:
                return None
            current = info.ppid
        return None

    def members(self, key: Hashable) -> set[int]:
        """Pids of ``key``'s tree as of the last scan."""
        return set(self._members.get(key, ()))

    def sample(self, roots: Mapping[Hashable, int]) -> dict[Hashable, dict[str, Any]]:
        """``{key: {"cpu_pct": float | None, "rss_bytes": int | None}}`` for each root; None
        when the root is gone (or, for ``cpu_pct``, on the first reading of a tree)."""
        now = self._clock()
        if not roots:
            self._members, self._roots, self._windows = {}, {}, {}
            return {}
        if dict(roots) != self._roots or now - self._scanned_at >= self.rescan_s:
            self._rescan(roots)
        out: dict[Hashable, dict[str, Any]] = {}
        for key in roots:
            usage: dict[tuple[int, int], int] = {}
            rss = 0
            for pid in self._members.get(key, ()):
                got = read_pid_usage(pid)
                if got is None:
                    continue
                start, ticks, pid_rss = got
                usage[(pid, start)] = ticks
                rss += pid_rss
            if not usage:
                out[key] = {"cpu_pct": None, "rss_bytes": None}
                continue
            window = self._windows.setdefault(key, _Window(self._min_window_s))
            ref = window.push(now, usage)
            cpu = None
            common = [ident for ident in usage if ref is not None and ident in ref[1]]
            if ref is not None and common and now > ref[0]:
                delta = sum(usage[ident] - ref[1][ident] for ident in common)
                cpu = round(100.0 * max(0, delta) / CLK_TCK / (now - ref[0]), 2)
            out[key] = {"cpu_pct": cpu, "rss_bytes": rss}
        for key in list(self._windows):
            if key not in roots:
                del self._windows[key]
        return out
