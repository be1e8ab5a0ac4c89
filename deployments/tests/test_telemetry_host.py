"""Host readings: CPU utilisation per NUMA node and per pinned CPU set (exact figures from a
``/proc/stat`` file written by the test), the real host's reading, and the CPU, RSS and
membership of a real process tree."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deployments.telemetry.host import HostSampler, ProcessTreeSampler, read_cpu_ticks


def stat_text(per_cpu: dict[int, tuple[int, int]]) -> str:
    """A ``/proc/stat`` head with, per CPU, ``busy`` ticks of user time and ``idle`` ticks idle
    (plus some iowait that must count as idle, and guest time already inside user)."""
    lines = []
    total_busy = sum(b for b, _ in per_cpu.values())
    total_idle = sum(i for _, i in per_cpu.values())
    lines.append(f"cpu  {total_busy} 0 0 {total_idle - 2 * len(per_cpu)} {2 * len(per_cpu)} 0 0 0 5 0")
    for cpu, (busy, idle) in sorted(per_cpu.items()):
        lines.append(f"cpu{cpu} {busy} 0 0 {idle - 2} 2 0 0 0 5 0")
    lines.append("intr 12345")
    return "\n".join(lines) + "\n"


def test_it_reads_busy_and_total_ticks_per_cpu(tmp_path: Path):
    path = tmp_path / "stat"
    path.write_text(stat_text({0: (30, 70), 1: (10, 90)}))
    ticks = read_cpu_ticks(str(path))
    assert ticks[0] == (30, 100) and ticks[1] == (10, 100) and ticks["all"] == (40, 200)


def test_it_computes_utilisation_per_numa_node_and_per_pinned_set(tmp_path: Path):
    path = tmp_path / "stat"
    path.write_text(stat_text({0: (0, 100), 1: (0, 100), 2: (0, 100), 3: (0, 100)}))
    now = [1000.0]
    host = HostSampler(numa_cpus={"0": [0, 1], "1": [2, 3]}, stat_path=str(path), clock=lambda: now[0])
    # One second later: CPU 0 busy half the time, CPU 1 all the time, CPUs 2-3 idle.
    path.write_text(stat_text({0: (50, 150), 1: (100, 100), 2: (0, 200), 3: (0, 200)}))
    now[0] += 1.0
    reading, pinned = host.sample(pinned_sets={"prefill": [0], "decode": [1], "both": [0, 1], "none": [],
                                               "absent": [17]})
    assert reading["cpu_pct"] == 37.5
    assert reading["cpu_pct_per_numa"] == {"0": 75.0, "1": 0.0}
    assert pinned == {"prefill": 50.0, "decode": 100.0, "both": 75.0, "none": None, "absent": None}


def test_it_computes_rates_over_at_least_half_a_second_at_high_sample_rates(tmp_path: Path):
    path = tmp_path / "stat"
    busy, total = 0, 0
    path.write_text(stat_text({0: (busy, total)}))
    now = [0.0]
    host = HostSampler(numa_cpus={"0": [0]}, stat_path=str(path), clock=lambda: now[0])
    # 8 Hz (0.125 s is exact in binary, so the window is exactly four steps); the CPU is busy for
    # one step in every four. A one-step window would swing between 0 % and 100 %; the 0.5 s
    # window holds steady at 25 %.
    seen = []
    for step in range(1, 21):
        total += 10
        busy += 10 if step % 4 == 0 else 0
        path.write_text(stat_text({0: (busy, total - busy)}))
        now[0] += 0.125
        reading, _ = host.sample()
        seen.append(reading["cpu_pct_per_numa"]["0"])
    assert seen[4:] == [25.0] * 16, seen


def test_it_reads_the_real_host():
    cpus = sorted(os.sched_getaffinity(0))
    host = HostSampler(numa_cpus={"0": cpus})
    time.sleep(0.2)
    reading, pinned = host.sample(pinned_sets={"mine": cpus})
    assert 0.0 <= reading["cpu_pct"] <= 100.0
    assert 0.0 <= reading["cpu_pct_per_numa"]["0"] <= 100.0 and 0.0 <= pinned["mine"] <= 100.0
    mem = reading["memory"]
    assert mem["total_bytes"] > mem["available_bytes"] > 0
    assert mem["used_bytes"] == mem["total_bytes"] - mem["available_bytes"]
    assert len(reading["loadavg"]) == 3 and all(x >= 0 for x in reading["loadavg"])


def test_the_host_figure_is_the_sum_of_the_same_per_cpu_lines_as_the_numa_nodes(tmp_path: Path):
    # An aggregate ``cpu`` line that is not the sum of the ``cpuN`` lines (the kernel reads each
    # CPU's idle time for it a moment apart, and sums every possible CPU): the host's figure
    # comes from the per-CPU lines, as a NUMA node's does.
    path = tmp_path / "stat"
    path.write_text(stat_text({0: (0, 100), 1: (0, 100)}))
    now = [0.0]
    host = HostSampler(numa_cpus={"0": [0, 1]}, stat_path=str(path), clock=lambda: now[0])
    text = stat_text({0: (10, 190), 1: (30, 170)})
    path.write_text(text.replace(text.splitlines()[0], "cpu  40 0 0 404 6 0 0 0 5 0"))   # 50 more idle
    now[0] += 1.0
    reading, _ = host.sample()
    assert reading["cpu_pct"] == reading["cpu_pct_per_numa"]["0"] == 20.0


def test_on_the_real_host_one_numa_node_of_every_cpu_reads_the_hosts_figure():
    # the real /proc/stat, with the CPUs busy now and then between readings
    cpus = sorted(c for c in read_cpu_ticks() if c != "all")
    host = HostSampler(numa_cpus={"0": cpus}, min_window_s=0.05)
    for _ in range(5):
        end = time.monotonic() + 0.06
        while time.monotonic() < end:
            pass
        reading, pinned = host.sample(pinned_sets={"all": cpus})
        assert reading["cpu_pct"] is not None
        assert reading["cpu_pct"] == reading["cpu_pct_per_numa"]["0"] == pinned["all"], reading


BUSY_TREE = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time\\nend = time.monotonic() + 60\\n"
    "while time.monotonic() < end: pass'])\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.readline()\n"
    "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(grandchild.pid, flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def busy_tree():
    proc = subprocess.Popen([sys.executable, "-c", BUSY_TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    yield proc
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def test_it_measures_a_real_process_tree_and_finds_its_members(busy_tree):
    child = int(busy_tree.stdout.readline())
    trees = ProcessTreeSampler(rescan_s=60.0)
    first = trees.sample({"engine": busy_tree.pid})
    assert first["engine"]["cpu_pct"] is None  # no window yet
    time.sleep(1.0)
    second = trees.sample({"engine": busy_tree.pid})["engine"]
    # The busy child spins one core; on a shared 2-core machine it gets less than all of it.
    assert 20.0 <= second["cpu_pct"] <= 205.0, second
    assert second["rss_bytes"] > 4 * 1024 * 1024
    assert trees.owner_of(child) == "engine" and trees.owner_of(busy_tree.pid) == "engine"
    assert trees.owner_of(os.getpid()) is None
    # A process born after the last scan is found through its ancestors.
    busy_tree.stdin.write("go\n")
    busy_tree.stdin.flush()
    grandchild = int(busy_tree.stdout.readline())
    assert grandchild not in trees.members("engine")
    assert trees.owner_of(grandchild) == "engine"


def test_it_reports_a_gone_tree_as_unknown_not_zero(busy_tree):
    trees = ProcessTreeSampler()
    trees.sample({"engine": busy_tree.pid})
    os.killpg(busy_tree.pid, signal.SIGKILL)
    busy_tree.wait(timeout=10)
    time.sleep(0.2)
    gone = trees.sample({"engine": busy_tree.pid})["engine"]
    assert gone == {"cpu_pct": None, "rss_bytes": None}
