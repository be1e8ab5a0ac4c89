"""Discovery when NVML initialises but a later call raises ``NVMLError``: the facts keep what
was read, ``nvml_status`` names each failed call with NVML's text, ``nvmlShutdown`` still runs,
and the node still registers.

NVML is played by :class:`FailingNvml`, the captured-host NVML of ``test_discovery`` with chosen
calls raising the real ``pynvml.NVMLError``; sysfs is a fixture tree.
"""
from __future__ import annotations

import pynvml
import pytest

from deployments.discovery import GPU_COUNT_FROM_SYSFS_PCI, NVML_OK, discover_node, read_nvml
from deployments.models import Node
from deployments.nodes import node_gpu_status, node_register
from deployments.tests.test_discovery import H200X2, CapturedNvml, h200_nvml, no_tools
from deployments.topology import node_facts_from_row


class FailingNvml(CapturedNvml):
    """:class:`CapturedNvml` whose named calls raise ``pynvml.NVMLError(code)``.

    ``fail`` maps a call name (``"nvmlDeviceGetCount"``) or ``(call name, GPU index)`` to an
    NVML error code. ``shutdowns`` counts ``nvmlShutdown`` calls.
    """

    def __init__(self, *args, fail: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail = fail
        self.shutdowns = 0

    def _maybe_fail(self, call: str, gpu: int | None = None) -> None:
        code = self.fail.get((call, gpu)) if gpu is not None else None
        code = code if code is not None else self.fail.get(call)
        if code is not None:
            raise pynvml.NVMLError(code)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1
        super().nvmlShutdown()
        self._maybe_fail("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._maybe_fail("nvmlSystemGetDriverVersion")
        return super().nvmlSystemGetDriverVersion()

    def nvmlDeviceGetCount(self) -> int:
        self._maybe_fail("nvmlDeviceGetCount")
        return super().nvmlDeviceGetCount()

    def nvmlDeviceGetHandleByIndex(self, index: int):
        self._maybe_fail("nvmlDeviceGetHandleByIndex", index)
        return super().nvmlDeviceGetHandleByIndex(index)

    def nvmlDeviceGetName(self, handle) -> str:
        self._maybe_fail("nvmlDeviceGetName", handle.index)
        return super().nvmlDeviceGetName(handle)

    def nvmlDeviceGetUUID(self, handle) -> str:
        self._maybe_fail("nvmlDeviceGetUUID", handle.index)
        return super().nvmlDeviceGetUUID(handle)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._maybe_fail("nvmlDeviceGetMemoryInfo", handle.index)
        return super().nvmlDeviceGetMemoryInfo(handle)

    def nvmlDeviceGetPciInfo(self, handle):
        self._maybe_fail("nvmlDeviceGetPciInfo", handle.index)
        return super().nvmlDeviceGetPciInfo(handle)


def _failing(fail: dict) -> FailingNvml:
    good = h200_nvml()
    return FailingNvml(good.gpus, driver=good.driver, cuda=good.cuda, fail=fail)


def test_a_failed_gpu_count_gives_no_gpus_and_says_which_call_failed():
    nvml = _failing({"nvmlDeviceGetCount": pynvml.NVML_ERROR_GPU_IS_LOST})

    facts = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvml=nvml, which=no_tools)

    assert facts.gpus == []
    assert facts.nvml_status == "nvmlDeviceGetCount failed: GPU is lost"
    assert (facts.pci_gpu_count, facts.gpu_count_source) == (2, GPU_COUNT_FROM_SYSFS_PCI)
    assert (facts.driver_version, facts.cuda_version) == ("580.159.04", "13.0")  # read before the count
    assert facts.cpu_count == 32
    assert (nvml.shutdowns, nvml.initialised) == (1, False)


def test_a_gpu_without_a_handle_is_kept_by_index_and_named_in_the_status():
    nvml = _failing({("nvmlDeviceGetHandleByIndex", 1): pynvml.NVML_ERROR_UNKNOWN})

    facts = discover_node(name="h200x2", sysfs_root=H200X2 / "sys", nvml=nvml, which=no_tools)

    assert [g.index for g in facts.gpus] == [0, 1]
    assert facts.gpus[0].uuid == h200_nvml().gpus[0].uuid
    assert facts.gpus[0].memory_total_bytes == h200_nvml().gpus[0].memory_total_bytes
    assert (facts.gpus[1].uuid, facts.gpus[1].name, facts.gpus[1].memory_total_bytes, facts.gpus[1].pci_bus_id) == (
        "", "", None, "")
    assert facts.nvml_status == "GPU 1: nvmlDeviceGetHandleByIndex failed: Unknown Error"
    assert nvml.shutdowns == 1


def test_failed_per_device_queries_keep_the_other_fields_and_are_all_named():
    nvml = _failing({
        ("nvmlDeviceGetName", 0): pynvml.NVML_ERROR_UNKNOWN,
        ("nvmlDeviceGetMemoryInfo", 0): pynvml.NVML_ERROR_NO_PERMISSION,
        ("nvmlDeviceGetPciInfo", 1): pynvml.NVML_ERROR_TIMEOUT,
    })

    gpus, driver, cuda, status = read_nvml(nvml=nvml)

    good = h200_nvml().gpus
    assert (gpus[0].name, gpus[0].memory_total_bytes, gpus[0].uuid, gpus[0].pci_bus_id) == (
        "", None, good[0].uuid, good[0].pci_bus_id)
    assert (gpus[1].name, gpus[1].pci_bus_id, gpus[1].memory_total_bytes) == (good[1].name, "", good[1].memory_total_bytes)
    assert status == ("GPU 0: nvmlDeviceGetName failed: Unknown Error; "
                      "GPU 0: nvmlDeviceGetMemoryInfo failed: Insufficient Permissions; "
                      "GPU 1: nvmlDeviceGetPciInfo failed: Timeout")
    assert (driver, cuda) == ("580.159.04", "13.0")
    assert nvml.shutdowns == 1


def test_a_failed_driver_version_and_shutdown_do_not_raise():
    nvml = _failing({"nvmlSystemGetDriverVersion": pynvml.NVML_ERROR_UNKNOWN,
                     "nvmlShutdown": pynvml.NVML_ERROR_UNKNOWN})

    gpus, driver, cuda, status = read_nvml(nvml=nvml)

    assert (len(gpus), driver, cuda) == (2, "", "13.0")
    assert status == "nvmlSystemGetDriverVersion failed: Unknown Error"  # a shutdown failure is only logged
    assert nvml.shutdowns == 1


def test_a_clean_run_still_says_ok_and_shuts_down_once():
    nvml = _failing({})

    gpus, _driver, _cuda, status = read_nvml(nvml=nvml)

    assert (len(gpus), status, nvml.shutdowns) == (2, NVML_OK, 1)


def test_a_failed_init_does_not_shut_down():
    nvml = FailingNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED, fail={})

    assert read_nvml(nvml=nvml) == ([], "", "", "Driver Not Loaded")
    assert nvml.shutdowns == 0


@pytest.mark.django_db
def test_a_node_with_a_failed_gpu_count_still_registers_and_says_why():
    nvml = _failing({"nvmlDeviceGetCount": pynvml.NVML_ERROR_GPU_IS_LOST})

    node = node_register(facts=discover_node(name="lost", sysfs_root=H200X2 / "sys", nvml=nvml, which=no_tools))

    node = Node.objects.prefetch_related("gpus").get(pk=node.pk)
    status = node_gpu_status(node)
    # NVML gave no count; the PCI bus still shows the two H200s, which are not usable.
    assert (status["count"], status["status"], status["reason"], status["text"]) == (
        2, "nvml_unavailable", "nvmlDeviceGetCount failed: GPU is lost",
        "2 NVIDIA GPUs on the PCI bus, not usable: NVML not available: nvmlDeviceGetCount failed: GPU is lost")
    assert node.gpus.count() == 0
    assert node_facts_from_row(node).nvml_status == "nvmlDeviceGetCount failed: GPU is lost"


@pytest.mark.django_db
def test_a_node_with_a_gpu_without_a_handle_still_registers_both_gpus():
    nvml = _failing({("nvmlDeviceGetHandleByIndex", 0): pynvml.NVML_ERROR_GPU_IS_LOST})

    node = node_register(facts=discover_node(name="half", sysfs_root=H200X2 / "sys", nvml=nvml, which=no_tools))

    assert sorted(node.gpus.values_list("index", flat=True)) == [0, 1]
    assert node.topology["nvml_status"] == "GPU 0: nvmlDeviceGetHandleByIndex failed: GPU is lost"
