"""Discovery on a kernel without NUMA (no ``devices/system/node`` in sysfs): the single NUMA
node 0, with all online CPUs, takes its memory from ``/proc/meminfo``'s ``MemTotal`` (kB there
means KiB; recorded in bytes) and ``memory_source`` says where the figure came from. sysfs and
procfs are fixture trees.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from deployments.discovery import (
    MEMORY_FROM_NUMA_MEMINFO,
    MEMORY_FROM_PROC_MEMINFO,
    DiscoveryError,
    discover_node,
)
from deployments.nodes import node_register
from deployments.tests.test_discovery import CPUONLY, SEED8, no_tools
from deployments.topology import NodeFacts, NumaFacts, node_facts_from_row



def _no_numa_tree(tmp_path: Path, meminfo: str | None) -> tuple[Path, Path]:
    sys_root = tmp_path / "sys"
    (sys_root / "devices" / "system" / "cpu").mkdir(parents=True)
    (sys_root / "devices" / "system" / "cpu" / "online").write_text("0-3\n")
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    if meminfo is not None:
        (proc_root / "meminfo").write_text(meminfo)
    return sys_root, proc_root


PROC_MEMINFO = "MemTotal:        8046576 kB\nMemFree:         1234567 kB\nMemAvailable:    5000000 kB\n"


def test_without_numa_the_single_node_takes_memtotal_from_proc_meminfo(tmp_path):
    sys_root, proc_root = _no_numa_tree(tmp_path, PROC_MEMINFO)

    facts = discover_node(name="tiny", sysfs_root=sys_root, procfs_root=proc_root, nvml=None, which=no_tools)

    assert facts.numa_nodes == [NumaFacts(index=0, cpus=(0, 1, 2, 3), memory_total_bytes=8046576 * 1024)]
    assert facts.memory_total_bytes == 8046576 * 1024
    assert facts.memory_source == MEMORY_FROM_PROC_MEMINFO
    assert NodeFacts.from_dict(facts.to_dict()).memory_source == MEMORY_FROM_PROC_MEMINFO


def test_without_numa_and_without_proc_meminfo_the_memory_stays_unknown(tmp_path):
    sys_root, proc_root = _no_numa_tree(tmp_path, None)

    facts = discover_node(name="tiny", sysfs_root=sys_root, procfs_root=proc_root, nvml=None, which=no_tools)

    assert facts.numa_nodes == [NumaFacts(index=0, cpus=(0, 1, 2, 3), memory_total_bytes=None)]
    assert (facts.memory_total_bytes, facts.memory_source) == (0, None)


def test_a_fixture_tree_without_numa_never_reads_this_hosts_proc_meminfo(tmp_path):
    sys_root, _proc_root = _no_numa_tree(tmp_path, PROC_MEMINFO)

    facts = discover_node(name="tiny", sysfs_root=sys_root, nvml=None, which=no_tools)

    assert (facts.numa_nodes[0].memory_total_bytes, facts.memory_source) == (None, None)


def test_with_numa_memory_still_comes_from_sysfs_and_says_so(tmp_path):
    proc_root = tmp_path / "proc"
    proc_root.mkdir()
    (proc_root / "meminfo").write_text("MemTotal:       999 kB\n")

    facts = discover_node(name="laptop", sysfs_root=CPUONLY / "sys", procfs_root=proc_root, nvml=None,
                          which=no_tools)
    seed = discover_node(name="seed-8gpu", sysfs_root=SEED8 / "sys", nvml=None, which=no_tools)

    assert (facts.memory_total_bytes, facts.memory_source) == (16231752 * 1024, MEMORY_FROM_NUMA_MEMINFO)
    assert seed.memory_source == MEMORY_FROM_NUMA_MEMINFO


def test_a_malformed_proc_memtotal_names_the_file(tmp_path):
    sys_root, proc_root = _no_numa_tree(tmp_path, "MemTotal:   lots kB\n")

    with pytest.raises(DiscoveryError, match=r"proc/meminfo: malformed MemTotal line 'MemTotal:   lots kB'"):
        discover_node(name="tiny", sysfs_root=sys_root, procfs_root=proc_root, nvml=None, which=no_tools)


@pytest.mark.django_db
def test_the_memory_source_is_kept_with_the_registered_node(tmp_path):
    sys_root, proc_root = _no_numa_tree(tmp_path, PROC_MEMINFO)

    node = node_register(facts=discover_node(name="tiny", sysfs_root=sys_root, procfs_root=proc_root, nvml=None,
                                             which=no_tools))

    assert node.memory_total_bytes == 8046576 * 1024
    assert node.numa_nodes.get(index=0).memory_total_bytes == 8046576 * 1024
    assert node_facts_from_row(node).memory_source == MEMORY_FROM_PROC_MEMINFO
