"""The kernel runner's environment is an allowlist (kernels.runnercall.runner_env): the control
plane's secrets never reach the runner, nvcc or a package's code (whose last output lines become
a failed job's reason), while what nvcc, Triton and PyTorch need does. And a runner that cannot
be started leaves no log file open."""
import os
import sys
from pathlib import Path

import pytest
from django.conf import settings

from kernels.runnercall import RunnerError, runner_env, runner_run

SECRETS = {
    "CEILING_SECRETS_KEY": "super-secret-fernet-key",
    "SECRET_KEY": "django-secret-key",
    "DATABASE_URL": "postgres://ceiling:dbpass@db/ceiling",
    "REDIS_URL": "redis://:redispass@cache:6379/0",
    "HF_TOKEN": "hf_abcdef",
    "LD_PRELOAD": "/tmp/evil.so",
    "TORCH_HUB_TOKEN": "tok",
    "TRITON_SERVER_API_KEY": "key",
}
ALLOWED = {
    "CUDA_HOME": "/usr/local/cuda-13.0",
    "CUDA_VISIBLE_DEVICES": "0",
    "TRITON_CACHE_DIR": "/tmp/triton-cache",
    "TORCH_CUDA_ARCH_LIST": "9.0",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "LC_ALL": "C.UTF-8",
    "CEILING_NVCC": "/usr/local/cuda/bin/nvcc",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
    "CC": "/usr/bin/gcc",
}
NAMES = sorted({*SECRETS, *ALLOWED, "PATH", "HOME", "PYTHONPATH", "PYTHONUNBUFFERED"})


def _child_env(tmp_path: Path, monkeypatch) -> dict:
    for name, value in {**SECRETS, **ALLOWED}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", "/opt/extra")
    out = tmp_path / "out.json"
    code = (f"import json, os; json.dump({{k: os.environ.get(k) for k in {NAMES!r}}}, open({str(out)!r}, 'w'))")
    return runner_run([sys.executable, "-c", code], out=out, timeout_s=60).payload


def test_the_runner_gets_no_secret_of_the_control_plane(tmp_path, monkeypatch):
    seen = _child_env(tmp_path, monkeypatch)
    leaked = {name: seen[name] for name in SECRETS if seen[name] is not None}
    assert leaked == {}


def test_the_runner_gets_what_nvcc_triton_and_pytorch_need(tmp_path, monkeypatch):
    seen = _child_env(tmp_path, monkeypatch)
    assert {name: seen[name] for name in ALLOWED} == ALLOWED
    assert seen["PATH"] == os.environ["PATH"] and seen["HOME"] == os.environ["HOME"]
    assert seen["PYTHONPATH"] == str(settings.BASE_DIR) + os.pathsep + "/opt/extra"
    assert seen["PYTHONUNBUFFERED"] == "1"


def test_a_secret_the_runner_would_print_is_not_in_its_reason(tmp_path, monkeypatch):
    """A failing runner's last lines become the job's reason: a variable it prints is not there."""
    monkeypatch.setenv("CEILING_SECRETS_KEY", "super-secret-fernet-key")
    out = tmp_path / "out.json"
    code = "import os, sys; print('key=' + str(os.environ.get('CEILING_SECRETS_KEY'))); sys.exit(3)"
    with pytest.raises(RunnerError) as caught:
        runner_run([sys.executable, "-c", code], out=out, timeout_s=60)
    assert "super-secret" not in str(caught.value) and "key=None" in str(caught.value)


def test_runner_env_reads_only_the_allowlist():
    env = runner_env(Path("/repo"), {"PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "x", "CUDA_HOME": "/c",
                                     "NVIDIA_API_KEY": "nv", "CEILING_SECRETS_KEY": "k", "LD_PRELOAD": "p",
                                     "CUDA_AUTH_TOKEN": "t"})
    assert env == {"PATH": "/bin", "CUDA_HOME": "/c", "PYTHONPATH": "/repo", "PYTHONUNBUFFERED": "1"}


def test_a_runner_that_cannot_start_leaves_no_log_file_open(tmp_path, monkeypatch):
    import kernels.runnercall as runnercall

    log = tmp_path / "runner.log"
    opened = []

    def spy(*args, **kwargs):
        f = open(*args, **kwargs)
        opened.append(f)
        return f

    monkeypatch.setattr(runnercall, "open", spy, raising=False)
    with pytest.raises(OSError):
        runner_run([str(tmp_path / "no-such-python"), "-c", "pass"], out=tmp_path / "out.json", timeout_s=5,
                   log_path=log)
    assert len(opened) == 1 and opened[0].closed
