"""``make demo`` prints each stored H200 job's results: the first run as it ingests the files, a
later run (the jobs already stored) the same device line and best variant per shape and batch,
read from the stored job, not only the job's link."""
from __future__ import annotations

import io

import pytest

from deployments.management.commands.demo import Command
from kernels.models import KernelJob
from kernels.services import kernel_package_register
from kernels.tests.conftest import REAL_PACKAGES

pytestmark = pytest.mark.django_db

PACKAGES = ("sparse_mla_decode", "sparse_mla_decode_cuda", "sparse_mla_decode_fp8")


def _kernels_said() -> str:
    out = io.StringIO()
    command = Command(stdout=out)
    command._kernels("http://demo")
    return out.getvalue()


def test_a_second_run_prints_the_stored_jobs_best_variants_as_the_first_did(settings, tmp_path):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    for name in PACKAGES:
        kernel_package_register(path=REAL_PACKAGES / name)

    first, again = _kernels_said(), _kernels_said()

    def bests(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("  best ") or line.startswith("  device ")]

    assert len([line for line in bests(first) if line.startswith("  device ")]) == 3
    assert any("% of roofline" in line and "over baseline" in line for line in bests(first))
    assert bests(again) == bests(first)
    assert again.count("stored earlier") == 3
    cuda = KernelJob.objects.get(package__name="sparse_mla_decode_cuda")
    assert f"(kernel job #{cuda.pk}: 378 of 378 measurements correct)" in again
    assert "results: stored" not in again  # nothing ingested twice
    # the packages compared by time, their speedups being over different baselines
    for said in (first, again):
        assert "Kernel results compared by time (median µs on the same device, shape and batch):" in said
        assert "  Fastest by time in the 14 entries that several packages share" in said
        assert "  sparse_mla_decode_fp8 takes longer than sparse_mla_decode in all 14 entries they share" in said
