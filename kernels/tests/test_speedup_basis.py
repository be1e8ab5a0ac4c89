"""A stored speedup says what it is measured against and where: the what-if (API and page) and
``kernel_job_ingest``'s printed best lines name the package's own ``baseline`` implementation, as
its manifest describes it, and the GPU both were measured on."""
import html
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from kernels.models import KernelBest, KernelPackage
from kernels.services import kernel_package_register
from kernels.templatetags.kernel_numbers import speedup_text
from kernels.tests.conftest import REAL_PACKAGES
from kernels.whatif import baseline_described

FLAGSHIP = "sparse_mla_decode"


@pytest.fixture
def flagship_job(db, settings, tmp_path):
    """The flagship's stored H200 job, ingested as ``make demo`` does; the command's output."""
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    kernel_package_register(path=REAL_PACKAGES / FLAGSHIP)
    results = REAL_PACKAGES / FLAGSHIP / "results"
    out = StringIO()
    call_command("kernel_job_ingest", str(results / "h200-results.json"), new=FLAGSHIP,
                 variants=str(results / "h200-variants.json"), builds=str(results / "sm90a-builds.json"), stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("name", ["sparse_mla_decode", "sparse_mla_decode_cuda", "sparse_mla_decode_fp8"])
def test_it_reads_every_real_packages_baseline_from_its_manifest(db, settings, tmp_path, name):
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    said = baseline_described(kernel_package_register(path=REAL_PACKAGES / name))
    assert said and "CUDA cores" in said and "(" not in said


def test_the_ingest_command_says_what_its_speedups_are_over(flagship_job):
    assert ("  speedups below are over package sparse_mla_decode's own baseline implementation (one program per "
            "request and head on the CUDA cores, every head re-reading every selected row: the seed deployment's "
            "fallback), both measured on NVIDIA H200; not over the kernel a deployment serves with now") in flagship_job
    lines = flagship_job.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("  speedups below"))
    assert all(not line.startswith("  best ") for line in lines[:said])
    assert any(line.startswith("  best ") and re.search(r"\d\.\d\d× over baseline", line)
               for line in lines[said:])
    assert not any("x over baseline" in line for line in lines)
    # The same writing as the pages' (kernel_numbers.speedup_text), best by best.
    for best in KernelBest.objects.filter(package__name=FLAGSHIP, speedup__isnull=False):
        assert any(f"best {best.shape} batch {best.batch}: " in line and f"{speedup_text(best.speedup)} over baseline"
                   in line for line in lines), best


def test_a_speedup_is_written_with_two_decimals_and_the_times_sign():
    assert [speedup_text(v) for v in (44.2449, 1, 0.5, None, float("nan"), True)] == [
        "44.24×", "1.00×", "0.50×", "—", "—", "—"]


def test_the_whatif_says_what_a_best_variants_speedup_is_over_and_where(flagship_job, viewer, viewer_api,
                                                                        seed_pd_sweep):
    best = KernelBest.objects.filter(package__name=FLAGSHIP, speedup__isnull=False).order_by("-speedup").first()
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": best.pk}).json()
    said = (f"the speedup {best.speedup:.2f}× is over package sparse_mla_decode's own baseline implementation (one "
            "program per request and head on the CUDA cores, every head re-reading every selected row: the seed "
            "deployment's fallback, as its manifest describes it), both measured on NVIDIA H200 "
            "(sm_90); it is not a speedup over the kernel a deployment serves with now")
    assert any(note.startswith(said) for note in body["notes"]), body["notes"]
    assert body["speedup"] == pytest.approx(best.speedup) and body["speedup_measured_at"]["best"] == best.pk
    assert body["speedup_source"] == (f"best variant #{best.pk} (sparse_mla_decode {best.shape_bucket} on NVIDIA "
                                      f"H200, {best.median_us:.2f} µs, over the package's own baseline implementation "
                                      f"({best.baseline_us:.2f} µs))")
    c = Client()
    c.force_login(viewer)
    html = c.get(f"/kernels/whatif/?sweep={seed_pd_sweep.pk}&best={best.pk}").content.decode()
    assert "over the package&#x27;s own baseline implementation on NVIDIA H200" in html
    assert f'<p class="notice">{said}'.replace("'", "&#x27;") in html


def test_a_given_speedup_gets_no_baseline_note(flagship_job, viewer_api, seed_pd_sweep):
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "speedup": 3}).json()
    assert not any("baseline implementation" in note for note in body["notes"])


def test_a_package_whose_manifest_does_not_describe_its_baseline_names_the_variants(viewer_api, measured_job,
                                                                                   seed_pd_sweep):
    best = KernelBest.objects.filter(job=measured_job, speedup__isnull=False).first()
    body = viewer_api.get("/api/kernel-whatif/", {"sweep": seed_pd_sweep.pk, "best": best.pk}).json()
    assert any("own baseline implementation (its variants with impl = 'baseline'), both measured on NVIDIA H200"
               in note for note in body["notes"]), body["notes"]


def test_the_best_variants_tables_write_each_speedup_as_the_other_kernel_pages_do(flagship_job, viewer):
    """The best-variants table (index, package and job pages) writes a speedup with the times sign,
    as the what-if and ``kernel_job_ingest`` do, not as a bare number under a "(×)" heading."""
    bests = list(KernelBest.objects.filter(package__name=FLAGSHIP).select_related("job"))
    assert any(best.speedup for best in bests)
    c = Client()
    c.force_login(viewer)
    for url in ("/kernels/", f"/kernels/packages/{FLAGSHIP}/", f"/kernels/jobs/{bests[0].job_id}/"):
        html = c.get(url).content.decode()
        table = html[html.index('<table class="kernel-best">'):]
        table = table[:table.index("</table>")]
        assert "Speedup (×)" not in table, url
        cells = re.findall(r'<td class="num">([^<]*)</td>', table)
        for best in bests:
            if best.speedup:
                assert speedup_text(best.speedup) in cells, (url, best.pk)


def test_only_the_flagships_baseline_is_called_the_seeds_fallback(db, settings, tmp_path):
    """Each package's baseline is named for what it is, from its manifest: the flagship's is the seed
    deployment's fallback; the CUDA package's is that shape written in CUDA C++, the FP8 package's
    that shape over the FP8 cache. None of the others calls itself the seed's fallback, in its
    baseline or its description (which the package page shows)."""
    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    said = {name: baseline_described(kernel_package_register(path=REAL_PACKAGES / name))
            for name in ("sparse_mla_decode", "sparse_mla_decode_cuda", "sparse_mla_decode_fp8")}
    assert said["sparse_mla_decode"].endswith(": the seed deployment's fallback")
    assert said["sparse_mla_decode_cuda"].startswith("one thread block per request and head on the CUDA cores")
    assert said["sparse_mla_decode_cuda"].endswith("the Triton flagship's baseline shape, written in CUDA C++")
    assert "over the FP8 cache, dequantizing each selected row" in said["sparse_mla_decode_fp8"]
    for name in ("sparse_mla_decode_cuda", "sparse_mla_decode_fp8"):
        package = KernelPackage.objects.get(name=name)
        assert "fallback" not in said[name] and "fallback" not in package.description, name
        assert "seed" not in said[name] and "seed" not in package.description, name


def test_the_package_page_and_the_whatif_say_what_each_packages_baseline_is(db, settings, tmp_path, viewer):
    from kernels.tests.conftest import stored_jobs_ingest

    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    stored_jobs_ingest()
    c = Client()
    c.force_login(viewer)
    page = html.unescape(c.get("/kernels/packages/sparse_mla_decode_fp8/").content.decode())
    baseline = re.search(r"<dt>Baseline</dt><dd>(.*?)</dd>", page, re.DOTALL).group(1)
    assert baseline.startswith("one program per request and head on the CUDA cores over the FP8 cache")
    assert "fallback" not in baseline
    page = html.unescape(c.get("/kernels/whatif/").content.decode())
    assert ("<code>sparse_mla_decode</code>'s baseline is one program per request and head on the CUDA cores, "
            "every head re-reading every selected row: the seed deployment's fallback.") in page
    assert ("<code>sparse_mla_decode_cuda</code>'s baseline is one thread block per request and head on the CUDA "
            "cores") in page
    assert "<code>sparse_mla_decode_fp8</code>'s baseline is one program per request and head on the CUDA cores over" in page
    assert "the seed's fallback" not in page
