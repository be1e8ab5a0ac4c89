"""Pinning verification against real processes: numactl-wrapped and sched_setaffinity spawns,
descendants, deliberate mismatches, and the NVML GPU check (skipped without a GPU)."""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from deployments.pinning import (
    EffectiveBinding,
    gpu_processes_nvml,
    gpu_verify,
    pinning_read,
    pinning_verify,
)
from deployments.supervisor import (
    ProcessHandle,
    process_spawn,
    process_stop,
)
from deployments.supervisor.procfs import proc_has_tag, proc_stat
from deployments.topology import format_cpulist, parse_cpulist

PROGS = Path(__file__).with_name("progs")
SLEEPER = str(PROGS / "sleeper.py")
ESCAPER = str(PROGS / "escaper.py")
ALL_CPUS = format_cpulist(os.sched_getaffinity(0))
needs_numactl = pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl not installed")
needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs at least 2 usable CPUs")


def spawn(tag: str, tmp_path: Path, argv: list[str], **spec_extra) -> ProcessHandle:
    spec = {"argv": argv, "env": spec_extra.pop("env", {}), **spec_extra}
    return process_spawn(spec=spec, log_path=tmp_path / "proc.log", log_max_bytes=65536, tag=tag)


def wait_for(predicate, timeout_s: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def node0_cpus() -> str:
    path = Path("/sys/devices/system/node/node0/cpulist")
    cpus = set(parse_cpulist(path.read_text().strip())) if path.exists() else set(os.sched_getaffinity(0))
    return format_cpulist(cpus & os.sched_getaffinity(0))


def test_it_reads_the_binding_of_a_process():
    binding = pinning_read(os.getpid())
    assert binding.cpus == ALL_CPUS
    status = Path("/proc/self/status").read_text()
    allowed = next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Mems_allowed_list"))
    assert binding.mems_allowed == format_cpulist(parse_cpulist(allowed))
    assert binding.mems == binding.mems_allowed  # default policy: the cpuset's nodes apply


def test_it_raises_for_a_missing_process():
    with pytest.raises(ProcessLookupError):
        pinning_read(2**22 + 1)


@needs_numactl
@needs_two_cpus
def test_it_verifies_a_numactl_physcpubind_and_membind_spawn(tag, tmp_path):
    argv = ["numactl", "--physcpubind=1", "--membind=0", "--", sys.executable, SLEEPER]
    handle = spawn(tag, tmp_path, argv, pin_method="numactl", cpus="1", mem_nodes="0")
    result = pinning_verify(handle, expected_cpus="1", expected_mems="0")
    assert result.ok, result.reason
    assert result.reason == ""
    assert result.effective == result.per_pid[handle.pid]
    assert result.effective.cpus == "1"
    assert result.effective.mems == "0"
    assert result.effective.mem_policy == "bind:0"
    assert Path(f"/proc/{handle.pid}/exe").resolve().name.startswith("python")
    assert process_stop(handle, grace_s=5).outcome == "terminated"


@needs_numactl
def test_it_verifies_a_numactl_cpunodebind_spawn_and_its_descendants(tag, tmp_path):
    pidfile = tmp_path / "child.pid"
    argv = ["numactl", "--cpunodebind=0", "--membind=0", "--", sys.executable, ESCAPER,
            "--mode", "setsid", "--pidfile", str(pidfile)]
    handle = spawn(tag, tmp_path, argv, pin_method="numactl", cpus=node0_cpus(), mem_nodes="0")
    child = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="child pid"))
    result = pinning_verify(handle, expected_cpus=node0_cpus(), expected_mems="0")
    assert result.ok, result.reason
    assert set(result.per_pid) >= {handle.pid, child}
    assert result.per_pid[child] == EffectiveBinding(
        cpus=node0_cpus(), mems="0", mems_allowed=result.per_pid[child].mems_allowed, mem_policy="bind:0"
    )
    process_stop(handle, grace_s=5)


def test_it_verifies_a_sched_setaffinity_spawn_and_its_descendants(tag, tmp_path):
    pidfile = tmp_path / "child.pid"
    argv = [sys.executable, ESCAPER, "--mode", "setsid", "--pidfile", str(pidfile)]
    handle = spawn(tag, tmp_path, argv, pin_method="sched_setaffinity", cpus="0")
    child = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="child pid"))
    result = pinning_verify(handle, expected_cpus="0", expected_mems=None)
    assert result.ok, result.reason
    assert result.effective.cpus == "0"
    assert result.per_pid[child].cpus == "0"
    assert os.sched_getaffinity(handle.pid) == {0}
    process_stop(handle, grace_s=5)


def _escapee(tmp_path: Path, handle: ProcessHandle, *, reparented: bool = True) -> int:
    """Pid of the escaper's escaped process once it is in place (and, for the orphan modes,
    reparented to the shim, the child subreaper)."""
    pidfile = tmp_path / "escaped.pid"
    escaped = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="the escapee"))
    if reparented:
        wait_for(lambda: (info := proc_stat(escaped)) and info.ppid == handle.pgid, what="reparenting")
    assert proc_stat(escaped).sid == escaped != handle.sid  # it really left the engine's session
    return escaped


def test_it_checks_a_grandchild_that_double_forked_and_called_setsid(tag, tmp_path):
    argv = [sys.executable, ESCAPER, "--mode", "orphan", "--pidfile", str(tmp_path / "escaped.pid")]
    handle = spawn(tag, tmp_path, argv, pin_method="sched_setaffinity", cpus="0")
    escaped = _escapee(tmp_path, handle)
    result = pinning_verify(handle, expected_cpus="0", expected_mems=None)
    assert result.ok, result.reason
    assert result.per_pid[escaped].cpus == "0"
    assert escaped in process_stop(handle, grace_s=5).terminated


def test_it_checks_a_double_forked_grandchild_that_also_dropped_the_tag(tag, tmp_path):
    argv = [sys.executable, ESCAPER, "--mode", "orphan-noenv", "--pidfile", str(tmp_path / "escaped.pid")]
    handle = spawn(tag, tmp_path, argv, pin_method="sched_setaffinity", cpus="0")
    escaped = _escapee(tmp_path, handle)
    wait_for(lambda: "sleeper" in Path(f"/proc/{escaped}/cmdline").read_text(), what="re-exec")
    assert not proc_has_tag(escaped, tag)
    result = pinning_verify(handle, expected_cpus="0", expected_mems=None)
    assert result.ok, result.reason
    assert result.per_pid[escaped].cpus == "0"
    assert escaped in process_stop(handle, grace_s=5).terminated


@needs_two_cpus
@pytest.mark.parametrize("mode", ["setsid", "orphan"])
def test_it_fails_an_escaped_descendant_that_moved_off_the_recipes_cpus(tag, tmp_path, mode):
    argv = [sys.executable, ESCAPER, "--mode", mode, "--escape-cpus", "1",
            "--pidfile", str(tmp_path / "escaped.pid")]
    handle = spawn(tag, tmp_path, argv, pin_method="sched_setaffinity", cpus="0")
    escaped = _escapee(tmp_path, handle, reparented=mode == "orphan")
    result = pinning_verify(handle, expected_cpus="0", expected_mems=None)
    assert not result.ok
    assert result.effective.cpus == "0"  # the engine itself is where the recipe put it
    assert f"pid {escaped} (" in result.reason
    assert "descendant: expected CPUs 0, effective 1" in result.reason
    assert escaped in process_stop(handle, grace_s=5).terminated
    wait_for(lambda: (info := proc_stat(escaped)) is None or not info.running, what="the escapee gone")


@needs_numactl
def test_it_reads_the_memory_policy_of_a_double_forked_grandchild(tag, tmp_path):
    argv = ["numactl", "--cpunodebind=0", "--membind=0", "--", sys.executable, ESCAPER,
            "--mode", "orphan", "--pidfile", str(tmp_path / "escaped.pid")]
    handle = spawn(tag, tmp_path, argv, pin_method="numactl", cpus=node0_cpus(), mem_nodes="0")
    escaped = _escapee(tmp_path, handle)
    result = pinning_verify(handle, expected_cpus=node0_cpus(), expected_mems="0")
    assert result.ok, result.reason
    assert result.per_pid[escaped].mem_policy == "bind:0"
    assert escaped in process_stop(handle, grace_s=5).terminated


@needs_two_cpus
def test_it_fails_a_mismatch_with_both_values_in_the_reason(tag, tmp_path):
    handle = spawn(tag, tmp_path, [sys.executable, SLEEPER], pin_method="none")
    result = pinning_verify(handle, expected_cpus="1", expected_mems=None)
    assert not result.ok
    assert result.effective.cpus == ALL_CPUS
    assert f"pid {handle.pid}" in result.reason
    assert f"expected CPUs 1, effective {ALL_CPUS}" in result.reason
    process_stop(handle, grace_s=5)


@needs_numactl
@needs_two_cpus
def test_it_fails_a_memory_node_mismatch_with_both_values(tag, tmp_path):
    argv = ["numactl", "--physcpubind=0", "--", sys.executable, SLEEPER]
    handle = spawn(tag, tmp_path, argv, pin_method="numactl")
    result = pinning_verify(handle, expected_cpus="0", expected_mems="1")
    assert not result.ok
    assert "expected memory nodes 1, effective 0" in result.reason
    assert "expected CPUs" not in result.reason
    process_stop(handle, grace_s=5)


@needs_two_cpus
def test_it_accepts_a_descendant_narrowed_to_a_subset_unless_strict(tag, tmp_path):
    pidfile = tmp_path / "child.pid"
    argv = [sys.executable, ESCAPER, "--mode", "narrow", "--child-cpus", "1", "--pidfile", str(pidfile)]
    handle = spawn(tag, tmp_path, argv, pin_method="sched_setaffinity", cpus="0-1")
    child = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="child pid"))
    relaxed = pinning_verify(handle, expected_cpus="0-1", expected_mems=None)
    assert relaxed.ok, relaxed.reason
    assert relaxed.per_pid[child].cpus == "1"
    strict = pinning_verify(handle, expected_cpus="0-1", expected_mems=None, strict_descendants=True)
    assert not strict.ok
    assert f"pid {child}" in strict.reason and "expected CPUs 0-1, effective 1" in strict.reason
    process_stop(handle, grace_s=5)


def test_it_reports_a_process_that_is_not_running(tag):
    gone = ProcessHandle(pid=2**22 + 1, start_ticks=1, pgid=2**22 + 1, sid=2**22 + 1, tag=tag)
    result = pinning_verify(gone, expected_cpus="0", expected_mems=None)
    assert (result.ok, result.effective) == (False, None)
    assert "not running" in result.reason


def _nvml_works() -> bool:
    return gpu_processes_nvml() is not None


def test_it_returns_none_when_nvml_is_unavailable(tag):
    if _nvml_works():
        pytest.skip("NVML is available here; the GPU test covers this host")
    assert gpu_processes_nvml([0]) is None
    handle = ProcessHandle(pid=os.getpid(), start_ticks=1, pgid=os.getpgid(0), sid=os.getsid(0), tag=tag)
    result = gpu_verify(handle, gpu_ids=[0])
    assert result.ok is None
    assert "NVML unavailable" in result.reason


def test_it_flags_stray_and_missing_gpus_from_an_nvml_table(tag, tmp_path):
    handle = spawn(tag, tmp_path, [sys.executable, SLEEPER])
    table = {0: [handle.pid], 1: [], 2: [123456]}
    assert gpu_verify(handle, gpu_ids=[0], nvml=table).ok is True
    result = gpu_verify(handle, gpu_ids=[1, 2], nvml=table)
    assert result.ok is False
    assert result.per_gpu == {0: [handle.pid], 1: [], 2: []}
    assert f"on unexpected GPUs 0 (pids [{handle.pid}])" in result.reason
    assert "no process of the tree on expected GPUs [1, 2]" in result.reason
    process_stop(handle, grace_s=5)


@pytest.mark.gpu
def test_it_sees_a_cuda_context_on_the_visible_gpu(tag, tmp_path):
    if not _nvml_works():
        pytest.skip("NVML cannot initialise: no NVIDIA GPU or driver")
    gpus = sorted(gpu_processes_nvml())
    target = gpus[-1]
    handle = spawn(
        tag, tmp_path, [sys.executable, str(PROGS / "cuda_hold.py")],
        env={"CUDA_VISIBLE_DEVICES": str(target), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    try:
        seen = wait_for(lambda: handle.pid in (gpu_processes_nvml([target]) or {}).get(target, []),
                        timeout_s=60, what="CUDA context in NVML")
        assert seen
        assert gpu_verify(handle, gpu_ids=[target]).ok is True
        others = [g for g in gpus if g != target]
        if others:
            wrong = gpu_verify(handle, gpu_ids=[others[0]])
            assert wrong.ok is False
            assert f"on unexpected GPUs {target}" in wrong.reason
    finally:
        process_stop(handle, grace_s=5)
