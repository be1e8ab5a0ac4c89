"""Run the kernel runner (``python -m kernels.runner``) as a subprocess and follow its progress.

The runner has no Django imports and runs in the engine's Python (``settings.CEILING_KERNEL_PYTHON``,
default this interpreter), so it is always a separate process started with an argv list (never a
shell). Its contract: it writes its result JSON only to ``--out`` and prints progress as
JSON lines ``{"progress": {"done": n, "total": m}}`` on stdout; anything else it prints is log.

:func:`runner_run` starts it in its own session (so a cancel or a timeout can end the whole
process group), reads stdout line by line, hands each progress line to a callback, and checks a
``should_stop`` callback every :data:`POLL_S` seconds. A non-zero exit, a missing or unreadable
output file, a timeout or a stop request raise :class:`RunnerError` / :class:`RunnerStopped` with
the reason and the last lines the runner wrote.

The runner gets an environment built from an allowlist (:func:`runner_env`), never this
process's whole environment: the control plane's own secrets (``SECRET_KEY``,
``CEILING_SECRETS_KEY``, ``DATABASE_URL`` with its password, API tokens) must not reach the runner,
nvcc or a package's code, whose last output lines become the job's reason that viewers read.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

# Seconds between checks of the stop callback and the timeout while the runner works.
POLL_S = 0.5
# Seconds between SIGTERM and SIGKILL when the runner is ended early.
KILL_GRACE_S = 5.0
# Log lines kept from the runner's output (stdout non-progress lines and stderr), for the reason.
LOG_LINES = 40
# Largest result file read back (bytes): thousands of variants x shapes stay far below it.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
# Variables copied from this process's environment into the runner's, by exact name: where
# programs are found and the user's home and locale, the temporary folder, the library path the
# CUDA driver may only be found through, the C and C++ compilers Triton's launcher and nvcc's host
# code are built with, the runner's own tool overrides (CEILING_NVCC, CEILING_PTXAS,
# CEILING_CUOBJDUMP: kernels.runner.build.find_tool), the GPUs the container exposes, and the
# thread counts of the CPU math libraries.
RUNNER_ENV_KEYS = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP",
    "LD_LIBRARY_PATH", "CC", "CXX", "CEILING_NVCC", "CEILING_PTXAS", "CEILING_CUOBJDUMP",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
})
# ... and by prefix: the locale (LC_ALL, LC_CTYPE, ...), the CUDA runtime (CUDA_HOME,
# CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, CUDA_CACHE_PATH, ...), nvcc (NVCC_CCBIN,
# NVCC_APPEND_FLAGS, ...), Triton (TRITON_CACHE_DIR, TRITON_PTXAS_PATH, ...) and PyTorch
# (TORCH_HOME, TORCH_CUDA_ARCH_LIST, PYTORCH_CUDA_ALLOC_CONF, ...).
RUNNER_ENV_PREFIXES = ("LC_", "CUDA_", "NVCC_", "TRITON_", "TORCH_", "PYTORCH_")
# A prefixed name holding one of these words is left out all the same: a credential that happens
# to start like a tool's settings (TORCH_HUB_TOKEN, TRITON_SERVER_API_KEY) is not the runner's.
RUNNER_ENV_SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")


class RunnerError(RuntimeError):
    """The runner failed: exit status, timeout or an unusable output file. The message carries
    the reason and the runner's last lines."""


class RunnerStopped(RuntimeError):
    """``should_stop`` returned True (a cancel): the runner was ended."""


@dataclass
class RunnerOutcome:
    """What a finished run produced: the parsed ``--out`` JSON, wall time (s) and the log tail."""

    payload: Any
    wall_s: float
    log: list[str] = field(default_factory=list)


def kernel_python() -> str:
    """The interpreter that runs the runner: ``settings.CEILING_KERNEL_PYTHON`` (environment
    variable of the same name), else the current interpreter. Must be an absolute path to an
    executable file: it becomes argv[0]."""
    import sys

    path = getattr(settings, "CEILING_KERNEL_PYTHON", None) or sys.executable
    if not os.path.isabs(path) or not os.access(path, os.X_OK):
        raise RunnerError(f"CEILING_KERNEL_PYTHON {path!r} is not an absolute path to an executable")
    return path


def runner_env(root: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The runner's environment: the variables of ``environ`` (default ``os.environ``) named in
    :data:`RUNNER_ENV_KEYS`, or starting with one of :data:`RUNNER_ENV_PREFIXES` and holding none
    of :data:`RUNNER_ENV_SECRET_WORDS`; ``PYTHONPATH`` with ``root`` first (so ``kernels.runner``
    imports) followed by this process's own ``PYTHONPATH``; and ``PYTHONUNBUFFERED=1`` (progress
    lines arrive as they are printed). Nothing else is passed: not ``SECRET_KEY``,
    ``CEILING_SECRETS_KEY``, ``DATABASE_URL``, ``REDIS_URL``, ``HF_TOKEN``, nor ``LD_PRELOAD`` or
    any other ``LD_`` variable but ``LD_LIBRARY_PATH``."""
    source = os.environ if environ is None else environ
    env = {}
    for name, value in source.items():
        if name in RUNNER_ENV_KEYS or (
                name.startswith(RUNNER_ENV_PREFIXES)
                and not any(word in name.upper() for word in RUNNER_ENV_SECRET_WORDS)):
            env[name] = value
    inherited = source.get("PYTHONPATH")
    env["PYTHONPATH"] = str(root) + (os.pathsep + inherited if inherited else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def runner_argv(command: str, *, package_dir: Path, variants: Path, out: Path, target: str | None = None,
                shapes: list[str] | None = None, batches: list[int] | None = None) -> list[str]:
    """The argv of one runner command (``compile`` or ``bench``), as the contract spells it:
    ``[python, -m, kernels.runner, compile, --package DIR, --variants FILE, --target cuda:90,
    --out FILE]`` or ``[..., bench, --package, --variants, --out, --shapes a,b, --batches 1,8]``."""
    if command not in ("compile", "bench"):
        raise ValueError(f"unknown runner command {command!r}")
    argv = [kernel_python(), "-m", "kernels.runner", command, "--package", str(package_dir),
            "--variants", str(variants)]
    if command == "compile":
        if not target:
            raise ValueError("compile needs a target such as cuda:90")
        argv += ["--target", target]
    argv += ["--out", str(out)]
    if command == "bench":
        if shapes:
            argv += ["--shapes", ",".join(shapes)]
        if batches:
            argv += ["--batches", ",".join(str(b) for b in batches)]
    return argv


def _progress_of(line: str) -> tuple[int, int] | None:
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    prog = data.get("progress") if isinstance(data, dict) else None
    if not isinstance(prog, dict):
        return None
    done, total = prog.get("done"), prog.get("total")
    if isinstance(done, int) and isinstance(total, int) and not isinstance(done, bool) and 0 <= done:
        return done, max(total, done)
    return None


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM the runner's process group, SIGKILL after the grace period."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def runner_run(argv: list[str], *, out: Path, timeout_s: float, on_progress: Callable[[int, int], None] | None = None,
               should_stop: Callable[[], bool] | None = None, cwd: Path | None = None,
               log_path: Path | None = None) -> RunnerOutcome:
    """Run ``argv`` (from :func:`runner_argv`) and return its ``--out`` JSON.

    ``cwd`` defaults to the repository root so ``kernels.runner`` imports; ``PYTHONPATH`` gets it
    too. The runner's environment is :func:`runner_env` (an allowlist), not this process's. Every stdout/stderr line is appended to ``log_path`` when given. ``on_progress(done,
    total)`` is called for each progress line, from this thread. Raises :class:`RunnerStopped`
    when ``should_stop()`` turned True, :class:`RunnerError` on a non-zero exit, after
    ``timeout_s`` seconds, or when ``out`` is missing, too large or not JSON.
    """
    root = Path(cwd or settings.BASE_DIR)
    env = runner_env(root)
    if out.exists():
        out.unlink()
    tail: deque[str] = deque(maxlen=LOG_LINES)
    tail_lock = threading.Lock()
    log_file = open(log_path, "a", encoding="utf-8", errors="replace") if log_path else None  # noqa: SIM115
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    except BaseException:
        if log_file is not None:
            log_file.close()
        raise

    def keep(line: str) -> None:
        with tail_lock:
            tail.append(line.rstrip("\n")[:2000])
            if log_file is not None:
                log_file.write(line if line.endswith("\n") else line + "\n")
                log_file.flush()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            keep(line)

    err_thread = threading.Thread(target=read_stderr, name="kernel-runner-stderr", daemon=True)
    err_thread.start()
    stop_reason: dict[str, str] = {}

    def watchdog() -> None:
        while proc.poll() is None:
            if should_stop is not None and should_stop():
                stop_reason["why"] = "stop"
                _end_group(proc)
                return
            if time.monotonic() - started > timeout_s:
                stop_reason["why"] = "timeout"
                _end_group(proc)
                return
            time.sleep(POLL_S)

    dog = threading.Thread(target=watchdog, name="kernel-runner-watchdog", daemon=True)
    dog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            prog = _progress_of(line)
            if prog is not None:
                if on_progress is not None:
                    on_progress(*prog)
            elif line.strip():
                keep(line)
        proc.wait()
        dog.join(timeout=KILL_GRACE_S + 11)
        err_thread.join(timeout=5)
    finally:
        if proc.poll() is None:
            _end_group(proc)
        if log_file is not None:
            log_file.close()
    wall = time.monotonic() - started
    last = "\n".join(list(tail)[-12:])
    if stop_reason.get("why") == "stop":
        raise RunnerStopped("stopped on request")
    if stop_reason.get("why") == "timeout":
        raise RunnerError(f"the runner did not finish within {timeout_s:.0f} s and was stopped"
                          + (f"; last output:\n{last}" if last else ""))
    if proc.returncode != 0:
        raise RunnerError(f"the runner exited with status {proc.returncode}" + (f":\n{last}" if last else ""))
    if not out.is_file():
        raise RunnerError(f"the runner exited 0 but wrote no {out.name}" + (f"; last output:\n{last}" if last else ""))
    size = out.stat().st_size
    if size > MAX_OUTPUT_BYTES:
        raise RunnerError(f"{out.name} is {size} bytes; at most {MAX_OUTPUT_BYTES} are read")
    try:
        payload = json.loads(out.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunnerError(f"{out.name} is not valid JSON: {exc}") from None
    return RunnerOutcome(payload=payload, wall_s=wall, log=list(tail))
