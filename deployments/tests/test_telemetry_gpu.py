"""GPU readings: the NVML mapping (with a small NVML stand-in that answers like the driver does,
including ``Not Supported``), the ``nvidia-smi --query-gpu`` parser (case C15) and the fallback
reader running a real executable named ``nvidia-smi``.

The real NVML path runs on an H200 with ``deployments/scripts/nvml_check.py``.
"""
from __future__ import annotations

import os
import stat
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from deployments.telemetry.gpu import (
    MIB,
    NvidiaSmiGpuReader,
    NvmlGpuReader,
    gpu_from_query_row,
    gpu_reader_open,
    gpus_from_query,
    parse_query_csv,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H200_TOTAL = 143771 * MIB  # 150,754,820,096 bytes (fixtures README)


class NVMLError(Exception):
    """Stands in for ``pynvml.NVMLError``: ``str()`` is the driver's text."""

    text = "Unknown Error"

    def __str__(self) -> str:
        return self.text


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    text = "Not Supported"


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    text = "Function Not Found"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    text = "NVML Shared Library Not Found"


class FakeNvml:
    """The NVML calls the reader makes, over a list of GPU dicts. Each GPU may name calls that
    raise ``Not Supported`` (``unsupported``) and its MIG mode; ``v2=False`` makes the versioned
    memory call missing, as on drivers before it existed. ``calls`` counts calls by name."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    nvmlMemory_v2 = 0x02000028
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1

    def __init__(self, gpus: list[dict], *, v2: bool = True, init_error: NVMLError | None = None) -> None:
        self.gpus, self.v2, self.init_error = gpus, v2, init_error
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _maybe(self, handle: int, name: str) -> dict:
        self._count(name)
        gpu = self.gpus[handle]
        if name in gpu.get("unsupported", ()):
            raise NVMLError_NotSupported()
        return gpu

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self._count("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h]["uuid"]

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H200"  # old bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None):
        gpu = self._maybe(h, "memory")
        total, reserved, used = gpu["total"], gpu["reserved"], gpu["used"]
        if version:
            if not self.v2:
                raise NVMLError_FunctionNotFound()
            return SimpleNamespace(total=total, reserved=reserved, used=used, free=total - reserved - used)
        return SimpleNamespace(total=total, used=used + reserved, free=total - reserved - used)

    def nvmlDeviceGetUtilizationRates(self, h: int):
        gpu = self._maybe(h, "utilization")
        return SimpleNamespace(gpu=gpu["util"], memory=gpu["mem_util"])

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._maybe(h, "power")["power_mw"]

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return self._maybe(h, "power_limit")["limit_mw"]

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._maybe(h, "temperature")["temp"]

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return self._maybe(h, "clock")["sm_mhz"]

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        gpu = self._maybe(h, "mig")
        return [int(gpu["mig"]), int(gpu["mig"])]

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        return self._maybe(h, "fan")["fan"]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int):
        gpu = self._maybe(h, "compute")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.get("compute", [])]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int):
        gpu = self._maybe(h, "graphics")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.get("graphics", [])]


def h200(index: int, **extra) -> dict:
    """An idle H200 as the captured host shows it: 616 MiB reserved, 0 MiB used, no fan."""
    gpu = {
        "uuid": f"GPU-0000000{index}", "total": H200_TOTAL, "reserved": 616 * MIB, "used": 0,
        "util": 0, "mem_util": 0, "power_mw": 76220, "limit_mw": 700000, "temp": 35, "sm_mhz": 345,
        "mig": False, "fan": 0, "unsupported": ("fan",),
    }
    gpu.update(extra)
    return gpu


def test_it_reads_an_idle_gpu_as_unused_with_reserved_memory_apart():
    reader = NvmlGpuReader(nvml=FakeNvml([h200(0)]))
    assert reader.open() == "ok"
    (gpu,) = reader.read()
    assert gpu["index"] == 0 and gpu["uuid"] == "GPU-00000000" and gpu["name"] == "NVIDIA H200"
    # nvidia-smi shows "0MiB / 143771MiB" for this GPU: reserved memory is not "used".
    assert gpu["memory"] == {
        "used_bytes": 0, "reserved_bytes": 616 * MIB, "total_bytes": H200_TOTAL,
        "free_bytes": H200_TOTAL - 616 * MIB,
    }
    assert (gpu["utilization_pct"], gpu["memory_utilization_pct"]) == (0, 0)
    assert gpu["power_w"] == 76.22 and gpu["power_limit_w"] == 700.0
    assert (gpu["temperature_c"], gpu["sm_clock_mhz"], gpu["mig_mode"]) == (35, 345, False)
    assert gpu["fan_speed_pct"] is None and gpu["unavailable"] == {"fan_speed_pct": "Not Supported"}
    assert gpu["processes"] == []


def test_it_falls_back_to_v1_memory_and_says_used_then_includes_reserved():
    reader = NvmlGpuReader(nvml=FakeNvml([h200(0, used=2 * MIB)], v2=False))
    reader.open()
    (gpu,) = reader.read()
    assert gpu["memory"]["used_bytes"] == 618 * MIB
    assert gpu["memory"]["reserved_bytes"] is None
    assert "used includes reserved" in gpu["unavailable"]["memory.reserved_bytes"]
    assert "Function Not Found" in gpu["unavailable"]["memory.reserved_bytes"]


def test_it_keeps_unsupported_values_null_with_the_reason_never_zero():
    # MIG enabled: utilisation is not available per GPU; power not readable either.
    nvml = FakeNvml([h200(0, mig=True, unsupported=("utilization", "power", "fan"))])
    reader = NvmlGpuReader(nvml=nvml)
    reader.open()
    (gpu,) = reader.read()
    assert gpu["mig_mode"] is True
    assert gpu["utilization_pct"] is None and gpu["memory_utilization_pct"] is None
    assert gpu["power_w"] is None
    assert gpu["unavailable"]["utilization_pct"] == "Not Supported"
    assert gpu["unavailable"]["memory_utilization_pct"] == "Not Supported"
    assert gpu["unavailable"]["power_w"] == "Not Supported"
    assert gpu["power_limit_w"] == 700.0 and gpu["temperature_c"] == 35
    # The answer "Not Supported" does not change between samples: it is not asked again at once.
    reader.read()
    assert nvml.calls["utilization"] == 1 and nvml.calls["power"] == 1
    assert nvml.calls["memory"] == 2 and nvml.calls["temperature"] == 2


def test_it_reports_unreadable_memory_as_unknown_with_one_reason():
    reader = NvmlGpuReader(nvml=FakeNvml([h200(0, unsupported=("memory", "fan"))]))
    reader.open()
    (gpu,) = reader.read()
    assert gpu["memory"] == {"used_bytes": None, "free_bytes": None, "total_bytes": None, "reserved_bytes": None}
    assert gpu["unavailable"]["memory"] == "Not Supported"
    assert gpu["temperature_c"] == 35  # the rest is still read


def test_it_reads_power_limit_and_mig_mode_only_every_slow_refresh():
    clock = [100.0]
    nvml = FakeNvml([h200(0)])
    reader = NvmlGpuReader(nvml=nvml, slow_refresh_s=10.0, clock=lambda: clock[0])
    reader.open()
    for _ in range(5):
        reader.read()
    assert nvml.calls["power_limit"] == 1 and nvml.calls["mig"] == 1 and nvml.calls["power"] == 5
    clock[0] += 10.0
    nvml.gpus[0]["limit_mw"] = 600000
    assert reader.read()[0]["power_limit_w"] == 600.0
    assert nvml.calls["power_limit"] == 2


def test_it_lists_processes_once_each_even_with_compute_and_graphics_contexts():
    nvml = FakeNvml([h200(0, used=900 * MIB, compute=[(4242, 800 * MIB), (77, None)],
                         graphics=[(4242, 800 * MIB), (5, 100 * MIB)])])
    reader = NvmlGpuReader(nvml=nvml)
    reader.open()
    (gpu,) = reader.read()
    assert gpu["processes"] == [
        {"pid": 5, "used_bytes": 100 * MIB},
        {"pid": 77, "used_bytes": None},  # NVML gave no figure (e.g. MIG): unknown, not 0
        {"pid": 4242, "used_bytes": 800 * MIB},
    ]


def test_it_reports_why_there_are_no_gpus_when_nvml_cannot_start():
    reader = NvmlGpuReader(nvml=FakeNvml([], init_error=NVMLError_LibraryNotFound()))
    assert reader.open() == "NVML cannot initialise: NVML Shared Library Not Found"
    assert reader.read() == []
    assert NvmlGpuReader(nvml=None).open() == "NVML not available"
    reader, status = gpu_reader_open(nvml=None, nvidia_smi=None)
    assert status == "NVML not available" and reader.read() == []


def test_it_shuts_nvml_down_once():
    nvml = FakeNvml([h200(0)])
    reader = NvmlGpuReader(nvml=nvml)
    reader.open()
    reader.close()
    reader.close()
    assert nvml.calls["shutdown"] == 1


# --- nvidia-smi --------------------------------------------------------------------------------


def test_it_parses_the_captured_query_with_header_and_units():
    rows = parse_query_csv((FIXTURES / "h200x2" / "query-gpu.csv").read_text())
    assert [r["index"] for r in rows] == ["0", "1"]
    gpu = gpu_from_query_row(rows[1])
    assert gpu["uuid"] == "GPU-8f6284fb-6446-e1dc-1efd-0d08141350d4"
    assert gpu["memory"]["total_bytes"] == 150_754_820_096
    assert gpu["memory"]["used_bytes"] == 0 and gpu["memory"]["free_bytes"] == 143156 * MIB
    assert gpu["power_w"] == 78.6 and gpu["power_limit_w"] == 700.0
    assert (gpu["utilization_pct"], gpu["temperature_c"], gpu["sm_clock_mhz"]) == (0, 37, 345)
    # Columns the capture did not ask for stay null silently, except reserved (always explained).
    assert gpu["mig_mode"] is None and "mig_mode" not in gpu["unavailable"]
    assert gpu["unavailable"] == {"memory.reserved_bytes": "memory.reserved not queried"}


# The captured H200 rows as --format=csv,noheader,nounits output with the C15 fields: MIG enabled
# (utilisation "[N/A]"), power "[Not Supported]", fan "N/A".
C15_FIELDS = ["index", "uuid", "name", "memory.total", "memory.used", "memory.free", "memory.reserved",
              "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
              "clocks.current.sm", "mig.mode.current", "fan.speed"]
C15_ROWS = textwrap.dedent("""\
    0, GPU-0f3cc1cf-565d-9b0a-543c-d4b754f70410, NVIDIA H200, 143771, 0, 143156, 616, [N/A], [N/A], 35, [Not Supported], 700.00, 345, Enabled, N/A
    1, GPU-8f6284fb-6446-e1dc-1efd-0d08141350d4, NVIDIA H200, 143771, 0, 143156, 616, 0, 0, 37, 78.60, 700.00, 345, Disabled, N/A
""")


def test_it_keeps_c15_values_null_with_the_raw_text_and_parses_the_rest():
    mig, plain = gpus_from_query(C15_ROWS, gpu_fields=C15_FIELDS)
    assert mig["mig_mode"] is True  # shown as MIG-partitioned
    assert mig["utilization_pct"] is None and mig["unavailable"]["utilization_pct"] == "[N/A]"
    assert mig["memory_utilization_pct"] is None and mig["unavailable"]["memory_utilization_pct"] == "[N/A]"
    assert mig["power_w"] is None and mig["unavailable"]["power_w"] == "[Not Supported]"
    assert mig["fan_speed_pct"] is None and mig["unavailable"]["fan_speed_pct"] == "N/A"
    assert mig["memory"] == {"total_bytes": 143771 * MIB, "used_bytes": 0, "free_bytes": 143156 * MIB,
                             "reserved_bytes": 616 * MIB}
    assert (mig["temperature_c"], mig["power_limit_w"], mig["sm_clock_mhz"]) == (35, 700.0, 345)
    assert set(mig["unavailable"]) == {"utilization_pct", "memory_utilization_pct", "power_w", "fan_speed_pct"}
    assert plain["mig_mode"] is False and plain["utilization_pct"] == 0 and plain["power_w"] == 78.6
    assert plain["unavailable"] == {"fan_speed_pct": "N/A"}


def test_it_refuses_a_row_that_does_not_match_the_fields():
    with pytest.raises(ValueError, match="expected 15"):
        parse_query_csv("0, GPU-x, NVIDIA H200\n", C15_FIELDS)


FAKE_SMI = """\
#!{python}
# A stand-in nvidia-smi: answers the two queries the reader makes with C15 rows; refuses
# memory.reserved like a driver older than that field when OLD_DRIVER is set.
import os, sys
args = sys.argv[1:]
with open(os.environ["SMI_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
query = args[0]
if query.startswith("--query-gpu="):
    if os.environ.get("OLD_DRIVER") and "memory.reserved" in query:
        print('Field "memory.reserved" is not a valid field to query.')
        sys.exit(2)
    rows = {rows!r}
    if "memory.reserved" not in query:
        rows = "\\n".join(", ".join(c for i, c in enumerate(r.split(", ")) if i != 6) for r in rows.splitlines())
    print(rows)
elif query.startswith("--query-compute-apps="):
    print("GPU-8f6284fb-6446-e1dc-1efd-0d08141350d4, 4242, 4616")
    print("GPU-0f3cc1cf-565d-9b0a-543c-d4b754f70410, 99, [N/A]")
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "bin" / "nvidia-smi"
    path.parent.mkdir()
    path.write_text(FAKE_SMI.format(python=sys.executable, rows=C15_ROWS))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("SMI_LOG", str(tmp_path / "smi.log"))
    return path


def test_it_reads_gpus_with_nvidia_smi_when_nvml_is_unavailable(fake_smi, tmp_path):
    reader, status = gpu_reader_open(nvml=FakeNvml([], init_error=NVMLError_LibraryNotFound()),
                                     nvidia_smi=str(fake_smi))
    assert status == "NVML cannot initialise: NVML Shared Library Not Found; reading GPUs with nvidia-smi"
    mig, plain = reader.read()
    assert reader.status == "ok"
    assert mig["mig_mode"] is True and mig["unavailable"]["utilization_pct"] == "[N/A]"
    assert mig["processes"] == [{"pid": 99, "used_bytes": None}]
    assert plain["processes"] == [{"pid": 4242, "used_bytes": 4616 * MIB}]
    calls = (tmp_path / "smi.log").read_text().splitlines()
    assert calls[0] == "--query-gpu=" + ",".join(C15_FIELDS) + " --format=csv,noheader,nounits"
    assert calls[1] == "--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits"
    # Within min_period_s the last reading is reused: nvidia-smi is not run again.
    reader.read()
    assert len((tmp_path / "smi.log").read_text().splitlines()) == 2


def test_it_asks_an_older_driver_again_without_memory_reserved(fake_smi, monkeypatch):
    monkeypatch.setenv("OLD_DRIVER", "1")
    reader = NvidiaSmiGpuReader(executable=str(fake_smi), min_period_s=0)
    mig, _ = reader.read()
    assert reader.status == "ok"
    assert mig["memory"]["reserved_bytes"] is None
    assert mig["unavailable"]["memory.reserved_bytes"] == "memory.reserved not queried"
    assert mig["memory"]["used_bytes"] == 0 and mig["memory"]["total_bytes"] == 143771 * MIB


def test_it_says_why_when_nvidia_smi_fails(tmp_path):
    broken = tmp_path / "nvidia-smi"
    broken.write_text(f"#!{sys.executable}\nimport sys\nprint('NVIDIA-SMI has failed because it could not "
                      "communicate with the NVIDIA driver.')\nsys.exit(9)\n")
    broken.chmod(0o755)
    reader = NvidiaSmiGpuReader(executable=str(broken), min_period_s=0)
    assert reader.read() == []
    assert reader.status.startswith("nvidia-smi failed: NVIDIA-SMI has failed because it could not communicate")


def test_it_runs_no_executable_but_nvidia_smi(tmp_path):
    with pytest.raises(ValueError, match="only nvidia-smi is allowed"):
        NvidiaSmiGpuReader(executable="/bin/sh")
    with pytest.raises(ValueError, match="only nvidia-smi is allowed"):
        NvidiaSmiGpuReader(executable=str(tmp_path / "nvidia-smi-wrapper"))


def test_it_imports_without_django():
    """``nvml_check.py`` runs on a bare GPU host: the reader modules must not need Django."""
    import subprocess

    code = ("import sys; sys.path.insert(0, '.'); import deployments.telemetry.gpu, deployments.telemetry.engine; "
            "print('django' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"
