"""Best variants of several packages listed together are compared by time, not by speedup: each
speedup is over its own package's baseline implementation, and the three sparse MLA decode packages'
baselines differ (v32 batch 1 on the H200: Triton 460.66 µs, CUDA 578.66 µs, FP8 cache 524.26 µs).
The what-if's picker shows each best variant's time (µs) and device beside its speedup and its own
baseline's time; the picker and the kernels index say which package is fastest per shape, batch and
device, and that the FP8-cache package takes longer than the bf16 Triton one in every entry
(kernels.selectors.best_time_comparison)."""
from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from kernels import selectors
from kernels.models import KernelBest
from kernels.tests.conftest import STORED_H200_PACKAGES as PACKAGES, stored_jobs_ingest



@pytest.fixture
def stored_jobs(db, settings, tmp_path):
    """The three packages' stored H200 jobs, ingested as ``make demo`` does."""
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    stored_jobs_ingest()


def _best(package: str, shape: str, batch: int) -> KernelBest:
    return KernelBest.objects.select_related("package").get(package__name=package, shape=shape, batch=batch)


def _page(viewer, url: str) -> str:
    client = Client()
    client.force_login(viewer)
    answer = client.get(url)
    assert answer.status_code == 200
    return html.unescape(answer.content.decode())


def test_the_packages_best_variants_are_compared_by_time_not_by_speedup(stored_jobs):
    triton, cuda, fp8 = (_best(name, "v32", 1) for name in PACKAGES)
    assert [round(b.baseline_us, 2) for b in (triton, cuda, fp8)] == [460.66, 578.66, 524.26]
    assert [round(b.median_us, 2) for b in (triton, cuda)] == [15.08, 10.30]
    assert [round(b.speedup, 2) for b in (triton, cuda)] == [30.56, 56.20]
    # the speedups' ratio (1.84) is not the times' (1.46): the baselines differ
    assert round(cuda.speedup / triton.speedup, 2) == 1.84 and round(triton.median_us / cuda.median_us, 2) == 1.46

    # the comparison names the fastest and the FP8 package as slower in every entry
    bests = list(selectors.best_list())
    notes = selectors.best_time_comparison(bests)
    assert notes[0] == ("Each speedup is over its own package's baseline implementation, and the baselines differ "
                        "(v32 batch 1 on NVIDIA H200: sparse_mla_decode 460.66 µs, sparse_mla_decode_cuda 578.66 µs, "
                        "sparse_mla_decode_fp8 524.26 µs): compare packages by their time (µs), not by their speedups. "
                        "sparse_mla_decode's baseline is one program per request and head on the CUDA cores, every "
                        "head re-reading every selected row: the seed deployment's fallback. "
                        "sparse_mla_decode_cuda's baseline is one thread block per request and head on the CUDA "
                        "cores, every head re-reading every selected row: the Triton flagship's baseline shape, "
                        "written in CUDA C++. "
                        "sparse_mla_decode_fp8's baseline is one program per request and head on the CUDA cores "
                        "over the FP8 cache, dequantizing each selected row as it reads it, every head re-reading "
                        "every row.")
    assert notes[1] == ("Fastest by time in the 14 entries that several packages share (the same device, compute "
                        "capability, shape and batch): sparse_mla_decode_cuda in all 14.")
    fp8 = next(note for note in notes if note.startswith("sparse_mla_decode_fp8 takes longer than sparse_mla_decode "))
    assert "in all 14 entries they share on NVIDIA H200" in fp8
    assert "v32 batch 64: 249.26 µs vs 176.42 µs" in fp8
    # each row knows the fastest of its entry and its time relative to it
    by_pk = {b.pk: b for b in bests}
    triton = by_pk[_best("sparse_mla_decode", "v32", 1).pk]
    assert triton.time_fastest.package.name == "sparse_mla_decode_cuda"
    assert triton.time_ratio == pytest.approx(15.08 / 10.30, rel=1e-3)
    cuda = by_pk[_best("sparse_mla_decode_cuda", "v32", 1).pk]
    assert cuda.time_fastest is cuda and cuda.time_ratio == 1.0
    for shape, batch in (("v32", 64), ("v4-flash", 1)):
        assert by_pk[_best("sparse_mla_decode_fp8", shape, batch).pk].time_ratio > 1

    # one package alone gets none
    bests = list(selectors.best_list(package="sparse_mla_decode"))
    assert selectors.best_time_comparison(bests) == []
    assert all(b.time_fastest is None for b in bests)


def test_the_whatif_picker_shows_each_speedup_with_its_time_device_and_own_baseline(stored_jobs, viewer, viewer_api,
                                                                                    seed_pd_sweep):
    page = _page(viewer, "/kernels/whatif/")
    options = dict(re.findall(r'<option value="(\d+)"[^>]*>(#\d+ sparse_mla[^<]*)</option>', page))
    triton, cuda = _best("sparse_mla_decode", "v32", 1), _best("sparse_mla_decode_cuda", "v32", 1)
    assert options[str(cuda.pk)] == (f"#{cuda.pk} sparse_mla_decode_cuda v32 batch 1 on NVIDIA H200: 10.30 µs, "
                                     "56.20× over its own baseline (578.66 µs); fastest of the packages")
    assert options[str(triton.pk)] == (f"#{triton.pk} sparse_mla_decode v32 batch 1 on NVIDIA H200: 15.08 µs, "
                                       "30.56× over its own baseline (460.66 µs); 1.46× the time of "
                                       "sparse_mla_decode_cuda")
    # the existing caveats stay, the comparison by time is stated beside them
    assert "It projects the deployment only when that baseline is what its engine runs now" in page
    assert "compare them by the time (µs) each option shows" in page
    assert "sparse_mla_decode_fp8 takes longer than sparse_mla_decode in all 14 entries they share" in page

    # the source of a projection from a best variant gives its time and its baseline's
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": cuda.pk}).json()
    assert body["speedup_source"] == (f"best variant #{cuda.pk} (sparse_mla_decode_cuda v32/batch=1 on NVIDIA H200, "
                                      "10.30 µs, over the package's own baseline implementation (578.66 µs))")
    page = _page(viewer, f"/kernels/whatif/?sweep={seed_pd_sweep.pk}&best={cuda.pk}")
    assert ("sparse_mla_decode_cuda v32/batch=1 on NVIDIA H200, 10.30 µs, 56.20× over the package's own baseline "
            "implementation on NVIDIA H200 (578.66 µs)") in page


def test_the_kernels_index_compares_the_packages_best_variants_by_time(stored_jobs, viewer):
    page = _page(viewer, "/kernels/")
    assert "Speedup over own baseline" in page and "By time among packages" in page
    assert "Fastest by time in the 14 entries that several packages share" in page
    assert "sparse_mla_decode_fp8 takes longer than sparse_mla_decode in all 14 entries they share" in page
    cells = re.findall(r"<td class=\"small\" data-by-time>(.*?)</td>", page, re.DOTALL)
    assert len(cells) == 42
    assert sum("<strong>fastest</strong>" in cell for cell in cells) == 14
    assert "1.46× the time of sparse_mla_decode_cuda (10.30 µs)" in page
    # a package's own page lists its best variants without a comparison
    page = _page(viewer, "/kernels/packages/sparse_mla_decode/")
    assert "By time among packages" not in page and "data-best-notes" not in page
