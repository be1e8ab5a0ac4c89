"""Per-GPU readings for the node sampler: NVML (``nvidia-ml-py``), or ``nvidia-smi --query-gpu``
when NVML cannot be used but the tool exists.

Plain Python (no Django at import time), so ``deployments/scripts/nvml_check.py`` runs it on a
bare GPU host.

Every reading is a dict in the shape of one entry of ``node.sample``'s ``gpus`` list::

    {"index": 0, "uuid": "GPU-…", "name": "NVIDIA H200",
     "memory": {"used_bytes", "free_bytes", "total_bytes", "reserved_bytes"},
     "utilization_pct", "memory_utilization_pct", "power_w", "power_limit_w", "temperature_c",
     "sm_clock_mhz", "mig_mode", "fan_speed_pct",
     "unavailable": {field: raw reason}, "processes": [{"pid", "used_bytes"}]}

A value that cannot be read is None and its field name maps to the raw reason in
``unavailable`` (NVML's error text such as ``Not Supported``, or nvidia-smi's ``[N/A]``), never
0: under MIG the utilisation is unknown, not idle. Memory figures are named ``memory.<key>``
there (``memory.reserved_bytes``), or ``memory`` when the whole query failed.

**Which memory figures.** ``nvidia-smi``'s "Memory-Usage" column and ``memory.used`` report
memory allocated by processes, *excluding* the memory the driver and firmware reserve. The
captured 2x H200 host shows it (``/work/shared/fixtures/h200x2/nvidia-smi-q.txt``, "FB Memory
Usage"): Total 143771 MiB, Reserved 616 MiB, Used 0 MiB, Free 143156 MiB, and the default view
shows ``0MiB / 143771MiB`` for that idle GPU. NVML's v2 memory query
(``nvmlDeviceGetMemoryInfo_v2``, ``nvmlMemory_v2_t``) has the same meaning: ``reserved`` is
separate and ``used`` is "Allocated device memory", with free = total − reserved − used (NVML API
reference, ``nvmlMemory_v2_t``, R590). The v1 query (``nvmlMemory_t``) documents ``used`` as
"Sum of Reserved and Allocated device memory", so an idle H200 would look 616 MiB used. This
module therefore asks for v2 and falls back to v1 only when the driver lacks it, saying so in
``unavailable["memory.reserved_bytes"]``. ``deployments/scripts/nvml_check.py`` checks the agreement
with ``nvidia-smi`` on a real GPU.
"""
from __future__ import annotations

import csv
import io
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

logger = logging.getLogger(__name__)

MIB = 1024 * 1024

#: Fields that change only with an administrator's action (power limit, MIG mode): read again
#: after this many seconds instead of on every sample.
SLOW_REFRESH_S = 10.0

#: ``nvidia-smi --query-gpu`` fields the fallback reader asks for, in this order.
QUERY_GPU_FIELDS: tuple[str, ...] = (
    "index", "uuid", "name", "memory.total", "memory.used", "memory.free", "memory.reserved",
    "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
    "clocks.current.sm", "mig.mode.current", "fan.speed",
)
#: ``nvidia-smi --query-compute-apps`` fields of the fallback reader.
QUERY_APPS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "used_memory")
#: Wall-clock limit of one ``nvidia-smi`` call; a wedged driver must not hang the sampler.
NVIDIA_SMI_TIMEOUT_S = 5.0
#: The only executable name the fallback reader runs (an allowlist of one).
NVIDIA_SMI_NAME = "nvidia-smi"

# nvidia-smi's words for "no value": "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]",
# "[Insufficient Permissions]", "[GPU is lost]" … all start with "[" or are "N/A".
_UNITS = ("MiB", "MHz", "W", "%", "C")


class _UseRealNvml:
    """Marker default: import ``pynvml`` (PyPI ``nvidia-ml-py``) when it is installed."""


REAL_NVML: Any = _UseRealNvml()


def _text(value: Any) -> str:
    # nvidia-ml-py before 11.5 returned bytes for strings; current releases return str.
    return value.decode() if isinstance(value, bytes) else str(value)


def empty_gpu(index: int, *, uuid: str = "", name: str = "") -> dict[str, Any]:
    """A GPU reading with every measured value None (the caller fills what it can read)."""
    return {
        "index": index, "uuid": uuid, "name": name,
        "memory": {"used_bytes": None, "free_bytes": None, "total_bytes": None, "reserved_bytes": None},
        "utilization_pct": None, "memory_utilization_pct": None, "power_w": None, "power_limit_w": None,
        "temperature_c": None, "sm_clock_mhz": None, "mig_mode": None, "fan_speed_pct": None,
        "unavailable": {}, "processes": [],
    }


# --------------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------------


class NvmlGpuReader:
    """Reads every GPU through NVML; ``status`` is ``"ok"`` or why NVML cannot be used.

    ``nvml`` is the ``pynvml`` module (default) or any object with the same functions and
    exception classes (``NVMLError``, ``NVMLError_NotSupported``), which is how the mapping is
    tested without a GPU. :meth:`open` initialises NVML once and keeps the device handles;
    :meth:`read` then costs one NVML call per field per GPU. Calls that answered "Not Supported"
    (a GPU without a fan, utilisation under MIG) and the power limit and MIG mode are asked
    again only every ``slow_refresh_s`` seconds, since they change only with an administrator's
    action; their last value or reason is reused in between.

    Units: bytes, percent (0-100, integers as NVML gives them), watts (NVML's milliwatts / 1000),
    degrees Celsius, MHz.
    """

    def __init__(self, *, nvml: Any = REAL_NVML, slow_refresh_s: float = SLOW_REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._nvml = nvml
        self._slow_refresh_s = slow_refresh_s
        self._clock = clock
        self._handles: list[tuple[int, Any, str, str]] = []
        self._cache: dict[tuple[int, str], tuple[float, Any, str | None]] = {}
        self._mem_v2: bool | None = None
        self._mem_v2_reason = ""
        self._opened = False
        self.status = "not opened"

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> str:
        """Initialise NVML and enumerate the GPUs; returns and stores :attr:`status`.

        ``"ok"`` on success (also with zero GPUs), else the reason, e.g. ``"pynvml is not
        installed"`` or NVML's own text (``"NVML Shared Library Not Found"``, ``"Driver Not
        Loaded"``). Never raises for an NVML problem.
        """
        nvml = self._nvml
        if isinstance(nvml, _UseRealNvml):
            try:
                import pynvml as nvml  # noqa: PLC0415 - optional on CPU-only hosts
            except ImportError:
                self.status = "pynvml is not installed (PyPI nvidia-ml-py)"
                return self.status
            self._nvml = nvml
        if nvml is None:
            self.status = "NVML not available"
            return self.status
        error = self._error
        try:
            nvml.nvmlInit()
        except error as exc:
            self.status = f"NVML cannot initialise: {exc}"
            return self.status
        self._opened = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except error as exc:
            self.status = f"NVML cannot count GPUs: {exc}"
            return self.status
        self._handles = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except error as exc:
                logger.warning("NVML cannot open GPU %d: %s", index, exc)
                handle = None
            uuid = name = ""
            if handle is not None:
                uuid = self._quiet(lambda: _text(nvml.nvmlDeviceGetUUID(handle)), "")
                name = self._quiet(lambda: _text(nvml.nvmlDeviceGetName(handle)), "")
            self._handles.append((index, handle, uuid, name))
        self.status = "ok"
        return self.status

    def close(self) -> None:
        """Shut NVML down (once per :meth:`open`); safe to call twice."""
        if self._opened:
            self._opened = False
            self._quiet(self._nvml.nvmlShutdown, None)

    @property
    def gpu_count(self) -> int:
        """GPUs NVML enumerated at :meth:`open` (0 before it or when NVML is unavailable)."""
        return len(self._handles)

    @property
    def _error(self) -> type[BaseException]:
        return getattr(self._nvml, "NVMLError", Exception)

    def _quiet(self, call: Callable[[], Any], default: Any) -> Any:
        try:
            return call()
        except self._error as exc:
            logger.debug("NVML query failed: %s", exc)
            return default

    def _not_supported(self, exc: BaseException) -> bool:
        cls = getattr(self._nvml, "NVMLError_NotSupported", None)
        return cls is not None and isinstance(exc, cls)

    # -- reading -------------------------------------------------------------------------------

    def read(self) -> list[dict[str, Any]]:
        """One reading per GPU, in NVML index order (the order of ``nvidia-smi`` and of
        ``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``). [] when NVML is not ok."""
        if self.status != "ok":
            return []
        return [self._read_gpu(index, handle, uuid, name) for index, handle, uuid, name in self._handles]

    def _call(self, gpu: dict[str, Any], index: int, field: str, call: Callable[[], Any], *, slow: bool = False) -> Any:
        """Run one NVML query for ``field``; on NVMLError store its text in
        ``gpu["unavailable"][field]`` and return None. Slow fields, and fields that answered
        "Not Supported", are served from the cache for ``slow_refresh_s``."""
        key = (index, field)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self._slow_refresh_s:
            _, value, reason = cached
            if reason is not None:
                gpu["unavailable"][field] = reason
            return value
        try:
            value = call()
        except self._error as exc:
            reason = str(exc) or type(exc).__name__
            gpu["unavailable"][field] = reason
            if slow or self._not_supported(exc):
                self._cache[key] = (now, None, reason)
            return None
        if slow:
            self._cache[key] = (now, value, None)
        return value

    def _read_gpu(self, index: int, handle: Any, uuid: str, name: str) -> dict[str, Any]:
        gpu = empty_gpu(index, uuid=uuid, name=name)
        if handle is None:
            for field in ("memory", "utilization_pct", "power_w", "temperature_c", "sm_clock_mhz", "processes"):
                gpu["unavailable"][field] = "NVML could not open this GPU"
            return gpu
        nvml = self._nvml
        self._read_memory(gpu, handle)
        rates = self._call(gpu, index, "utilization_pct", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        if rates is not None:
            gpu["utilization_pct"] = int(rates.gpu)
            gpu["memory_utilization_pct"] = int(rates.memory)
        else:
            gpu["unavailable"]["memory_utilization_pct"] = gpu["unavailable"]["utilization_pct"]
        power = self._call(gpu, index, "power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        gpu["power_w"] = None if power is None else round(int(power) / 1000.0, 3)
        limit = self._call(gpu, index, "power_limit_w", lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle),
                           slow=True)
        gpu["power_limit_w"] = None if limit is None else round(int(limit) / 1000.0, 3)
        temp = self._call(gpu, index, "temperature_c",
                          lambda: nvml.nvmlDeviceGetTemperature(handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)))
        gpu["temperature_c"] = None if temp is None else int(temp)
        clock = self._call(gpu, index, "sm_clock_mhz",
                           lambda: nvml.nvmlDeviceGetClockInfo(handle, getattr(nvml, "NVML_CLOCK_SM", 1)))
        gpu["sm_clock_mhz"] = None if clock is None else int(clock)
        mig = self._call(gpu, index, "mig_mode", lambda: nvml.nvmlDeviceGetMigMode(handle), slow=True)
        gpu["mig_mode"] = None if mig is None else bool(mig[0])
        fan = self._call(gpu, index, "fan_speed_pct", lambda: nvml.nvmlDeviceGetFanSpeed(handle))
        gpu["fan_speed_pct"] = None if fan is None else int(fan)
        gpu["processes"] = self._read_processes(gpu, handle)
        return gpu

    def _read_memory(self, gpu: dict[str, Any], handle: Any) -> None:
        nvml, error, mem = self._nvml, self._error, gpu["memory"]
        if self._mem_v2 is not False:
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            except (TypeError, AttributeError) as exc:
                # A binding without the versioned call (nvidia-ml-py before 11.510).
                self._mem_v2, self._mem_v2_reason = False, f"memory info v2 not in this NVML binding ({exc})"
            except error as exc:
                if self._not_supported(exc) or type(exc).__name__ in (
                    "NVMLError_FunctionNotFound", "NVMLError_ArgumentVersionMismatch"
                ):
                    self._mem_v2, self._mem_v2_reason = False, f"memory info v2 unavailable: {exc}"
                else:
                    gpu["unavailable"]["memory"] = str(exc)
                    return
            else:
                self._mem_v2 = True
                mem.update(used_bytes=int(info.used), free_bytes=int(info.free), total_bytes=int(info.total),
                           reserved_bytes=int(info.reserved))
                return
        try:
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
        except error as exc:
            gpu["unavailable"]["memory"] = str(exc)
            return
        mem.update(used_bytes=int(info.used), free_bytes=int(info.free), total_bytes=int(info.total))
        gpu["unavailable"]["memory.reserved_bytes"] = f"{self._mem_v2_reason}; used includes reserved memory (v1)"

    def _read_processes(self, gpu: dict[str, Any], handle: Any) -> list[dict[str, Any]]:
        nvml, error = self._nvml, self._error
        found: dict[int, int | None] = {}
        reasons = []
        for kind, fn_name in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                              ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            fn = getattr(nvml, fn_name, None)
            if fn is None:
                continue
            try:
                procs = fn(handle)
            except error as exc:
                reasons.append(f"{kind}: {exc}")
                continue
            for proc in procs:
                pid = int(proc.pid)
                used = getattr(proc, "usedGpuMemory", None)
                used = None if used is None else int(used)
                # A process with both a compute and a graphics context ("C+G" in nvidia-smi) is
                # listed twice with the same memory figure: keep one, never the sum.
                prev = found.get(pid)
                found[pid] = used if prev is None else (prev if used is None else max(prev, used))
        if len(reasons) == 2:
            gpu["unavailable"]["processes"] = "; ".join(reasons)
        return [{"pid": pid, "used_bytes": used} for pid, used in sorted(found.items())]


# --------------------------------------------------------------------------------------------
# nvidia-smi (fallback)
# --------------------------------------------------------------------------------------------


def _field_name(header: str) -> str:
    # "memory.total [MiB]" → "memory.total"; "index" stays.
    return header.strip().split(" [", 1)[0].strip()


def parse_query_csv(text: str, fields: Iterable[str] | None = None) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-…=F1,F2 --format=csv[,noheader][,nounits]`` as dicts of
    field name → raw cell text (surrounding spaces removed).

    ``fields`` names the columns of a ``noheader`` output; when None the first line is the
    header (``memory.total [MiB]`` is named ``memory.total``). Empty lines are skipped.

    Raises:
        ValueError: a row with a different number of cells than there are fields, with the row.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    reader = csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True)
    rows = list(reader)
    if fields is None:
        if not rows:
            return []
        names = [_field_name(h) for h in rows[0]]
        rows = rows[1:]
    else:
        names = list(fields)
    out = []
    for row in rows:
        cells = [c.strip() for c in row]
        if len(cells) != len(names):
            raise ValueError(f"nvidia-smi row has {len(cells)} cells, expected {len(names)} "
                             f"({', '.join(names)}): {row!r}")
        out.append(dict(zip(names, cells)))
    return out


def _strip_unit(raw: str) -> str:
    for unit in _UNITS:
        if raw.endswith(" " + unit):
            return raw[: -len(unit) - 1].strip()
    return raw


def _is_missing(raw: str) -> bool:
    return raw == "" or raw.startswith("[") or raw.upper() == "N/A"


def _number(gpu: dict[str, Any], field: str, raw: str | None, kind: type) -> Any:
    """Parse a numeric cell; ``[N/A]``, ``[Not Supported]``, ``N/A`` or garbage → None with the
    raw text in ``unavailable[field]``. An absent column leaves the value None silently."""
    if raw is None:
        return None
    text = _strip_unit(raw)
    if not _is_missing(text):
        try:
            return kind(float(text)) if kind is int else float(text)
        except ValueError:
            pass
    gpu["unavailable"][field] = raw
    return None


def gpu_from_query_row(row: dict[str, str]) -> dict[str, Any]:
    """One ``--query-gpu`` row (see :func:`parse_query_csv`, with or without units) as a GPU
    reading. Memory columns are MiB (2**20 bytes); power W; clocks MHz; temperature °C.

    ``mig.mode.current`` ``Enabled``/``Disabled`` → True/False. Any cell that is ``[N/A]``,
    ``[Not Supported]``, ``N/A`` or otherwise not a number is None with the raw text kept in
    ``unavailable`` (measurement case C15), and the other columns are still parsed.

    Raises:
        ValueError: the row has no usable ``index``.
    """
    try:
        index = int(row["index"])
    except (KeyError, ValueError):
        raise ValueError(f"nvidia-smi row without a GPU index: {row!r}") from None
    gpu = empty_gpu(index, uuid=row.get("uuid", ""), name=row.get("name", ""))
    mem = gpu["memory"]
    for key, column in (("total_bytes", "memory.total"), ("used_bytes", "memory.used"),
                        ("free_bytes", "memory.free"), ("reserved_bytes", "memory.reserved")):
        mib = _number(gpu, f"memory.{key}", row.get(column), int)
        mem[key] = None if mib is None else mib * MIB
    if "memory.reserved" not in row:
        gpu["unavailable"]["memory.reserved_bytes"] = "memory.reserved not queried"
    gpu["utilization_pct"] = _number(gpu, "utilization_pct", row.get("utilization.gpu"), int)
    gpu["memory_utilization_pct"] = _number(gpu, "memory_utilization_pct", row.get("utilization.memory"), int)
    gpu["temperature_c"] = _number(gpu, "temperature_c", row.get("temperature.gpu"), int)
    gpu["power_w"] = _number(gpu, "power_w", row.get("power.draw"), float)
    gpu["power_limit_w"] = _number(gpu, "power_limit_w", row.get("power.limit"), float)
    gpu["sm_clock_mhz"] = _number(gpu, "sm_clock_mhz", row.get("clocks.current.sm", row.get("clocks.sm")), int)
    gpu["fan_speed_pct"] = _number(gpu, "fan_speed_pct", row.get("fan.speed"), int)
    mig = row.get("mig.mode.current")
    if mig is not None:
        if mig.lower() == "enabled":
            gpu["mig_mode"] = True
        elif mig.lower() == "disabled":
            gpu["mig_mode"] = False
        else:
            gpu["unavailable"]["mig_mode"] = mig
    return gpu


def gpus_from_query(gpu_text: str, apps_text: str = "", *, gpu_fields: Iterable[str] | None = QUERY_GPU_FIELDS,
                    apps_fields: Iterable[str] | None = QUERY_APPS_FIELDS) -> list[dict[str, Any]]:
    """GPU readings from ``--query-gpu`` output plus per-process memory from
    ``--query-compute-apps=gpu_uuid,pid,used_memory`` output (matched to GPUs by UUID;
    ``used_memory`` in MiB, ``[N/A]`` → None). Pass ``gpu_fields=None`` for output with a header.

    Raises:
        ValueError: malformed rows (see :func:`parse_query_csv`).
    """
    gpus = [gpu_from_query_row(row) for row in parse_query_csv(gpu_text, gpu_fields)]
    by_uuid = {g["uuid"]: g for g in gpus if g["uuid"]}
    for row in parse_query_csv(apps_text, apps_fields) if apps_text.strip() else []:
        gpu = by_uuid.get(row.get("gpu_uuid", ""))
        if gpu is None:
            continue
        try:
            pid = int(row["pid"])
        except (KeyError, ValueError):
            continue
        used_text = _strip_unit(row.get("used_memory", ""))
        used = int(float(used_text)) * MIB if used_text and not _is_missing(used_text) else None
        gpu["processes"].append({"pid": pid, "used_bytes": used})
    for gpu in gpus:
        gpu["processes"].sort(key=lambda p: p["pid"])
    return gpus


class NvidiaSmiGpuReader:
    """Fallback reader: runs ``nvidia-smi --query-gpu`` and ``--query-compute-apps`` (argv lists,
    no shell) and parses them with :func:`gpus_from_query`.

    ``executable`` must be a path whose file name is ``nvidia-smi`` (the allowlist of this
    reader). One call costs tens of milliseconds of CPU in the tool, so the sampler reads it at
    most once per ``min_period_s`` and reuses the last reading in between. ``status`` is ``"ok"``
    or the reason of the last failure. Drivers older than the ``memory.reserved`` field answer
    "not a valid field"; the query is then repeated once without it.
    """

    def __init__(self, *, executable: str, min_period_s: float = 1.0,
                 run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if os.path.basename(executable) != NVIDIA_SMI_NAME:
            raise ValueError(f"refusing to run {executable!r}: only {NVIDIA_SMI_NAME} is allowed here")
        self.executable = executable
        self.min_period_s = min_period_s
        self._run = run
        self._clock = clock
        self._fields = list(QUERY_GPU_FIELDS)
        self._last: tuple[float, list[dict[str, Any]]] | None = None
        self.status = "ok"

    def _query(self, args: list[str]) -> str:
        done = self._run([self.executable, *args], capture_output=True, text=True,
                         timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError((done.stdout + done.stderr).strip()[:300] or f"exit code {done.returncode}")
        return done.stdout

    def read(self) -> list[dict[str, Any]]:
        """GPU readings (cached for ``min_period_s``); [] with :attr:`status` set on failure."""
        now = self._clock()
        if self._last is not None and now - self._last[0] < self.min_period_s:
            return self._last[1]
        try:
            try:
                gpu_text = self._query([f"--query-gpu={','.join(self._fields)}", "--format=csv,noheader,nounits"])
            except RuntimeError as exc:
                if "memory.reserved" not in self._fields or "not a valid field" not in str(exc).lower():
                    raise
                self._fields.remove("memory.reserved")
                gpu_text = self._query([f"--query-gpu={','.join(self._fields)}", "--format=csv,noheader,nounits"])
            apps_text = self._query([f"--query-compute-apps={','.join(QUERY_APPS_FIELDS)}",
                                     "--format=csv,noheader,nounits"])
            gpus = gpus_from_query(gpu_text, apps_text, gpu_fields=self._fields)
        except (OSError, subprocess.TimeoutExpired, RuntimeError, ValueError) as exc:
            self.status = f"nvidia-smi failed: {exc}"
            self._last = (now, [])
            return []
        self.status = "ok"
        self._last = (now, gpus)
        return gpus

    def close(self) -> None:
        """Nothing to release (kept for symmetry with :class:`NvmlGpuReader`)."""


def gpu_reader_open(*, nvml: Any = REAL_NVML, nvidia_smi: str | None = None) -> tuple[Any, str]:
    """The best GPU reader of this host and the ``nvml`` status text for ``node.sample``.

    NVML first; when it cannot be used and ``nvidia_smi`` (an absolute path, or None) is given,
    the ``nvidia-smi`` reader, with status ``"<NVML reason>; reading GPUs with nvidia-smi"``.
    Returns ``(reader, status)``; the reader's ``read()`` gives [] on a host without GPUs.
    """
    reader = NvmlGpuReader(nvml=nvml)
    status = reader.open()
    if status == "ok" or not nvidia_smi:
        return reader, status
    reader.close()
    return NvidiaSmiGpuReader(executable=nvidia_smi), f"{status}; reading GPUs with nvidia-smi"
