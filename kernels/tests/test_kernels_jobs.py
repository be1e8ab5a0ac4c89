"""Kernel jobs run for real (kernels.services.kernel_job_execute): the runner is started as a
subprocess (``python -m kernels.runner``), its progress lines land on the row, its output is
stored; the state machine, cancellation (the runner's process group is ended) and failures with
the runner's own reason. Triton compiles to sm_90 need no GPU; the nvcc path skips without nvcc."""
import shutil
import threading
import time

import pytest

from controlplane.errors import Conflict, InvalidInput
from kernels.models import KernelBuild, KernelJob
from kernels.services import (
    kernel_job_cancel,
    kernel_job_create,
    kernel_job_execute,
    kernel_jobs_reap,
    kernel_package_register,
)

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed (CUDA toolkit)")

try:
    import triton  # noqa: F401
    HAVE_TRITON = True
except ImportError:
    HAVE_TRITON = False
needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="Triton is not installed in this Python")


def _gpu_present() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _flagship(real_packages):
    return kernel_package_register(path=real_packages / "sparse_mla_decode")


@pytest.mark.slow
@needs_triton
def test_it_builds_triton_variants_on_a_node_without_a_gpu_and_says_so(real_packages, cpu_node, monkeypatch,
                                                                       settings):
    pkg = _flagship(real_packages)
    seen: list[tuple[str, int, int]] = []
    import kernels.services.jobs as svc

    original = svc._progress

    def spy(job_id, phase, done, total, *, force=False):
        seen.append((phase, done, total))
        original(job_id, phase, done, total, force=force)

    monkeypatch.setattr(svc, "_progress", spy)
    job = kernel_job_create(package=pkg, node=cpu_node, cc="9.0", dispatch=False,
                            params_subset={"impl": ["baseline", "head_tiled"], "BLOCK_H": [16], "BLOCK_N": [16],
                                           "num_warps": [4], "num_stages": [1]})
    KernelJob.objects.filter(pk=job.pk).update(note="")
    assert job.variants_total == 2
    assert kernel_job_execute(job_id=job.pk) == "done"
    job.refresh_from_db()
    assert job.note == "no GPU on node cpu-box: builds only"
    assert (job.builds_ok, job.builds_failed, job.phase, job.progress_done, job.progress_total) == (2, 0, "compile", 2, 2)
    assert job.compiler.startswith("triton ") and job.build_s > 0 and job.started_at and job.ended_at
    assert ("compile", 2, 2) in seen  # the runner's last progress line reached the row
    builds = {b.variant.params["impl"]: b for b in KernelBuild.objects.filter(variant__job=job).select_related("variant")}
    assert builds["baseline"].tensor_core is False and builds["baseline"].tensor_core_evidence == "none"
    assert builds["head_tiled"].tensor_core is True and builds["head_tiled"].tensor_core_evidence in ("mma", "wgmma")
    assert all(b.registers and b.registers > 0 and b.shared_bytes is not None and b.build_s > 0 for b in builds.values())
    work = settings.VAR_DIR / "kernels" / "jobs" / str(job.pk)
    assert sorted(p.name for p in work.iterdir()) == ["builds.json", "runner.log", "variants.json"]


@pytest.mark.slow
@needs_nvcc
def test_it_builds_the_cuda_package_with_nvcc(real_packages, cpu_node):
    pkg = kernel_package_register(path=real_packages / "sparse_mla_decode_cuda")
    job = kernel_job_create(package=pkg, node=cpu_node, cc="9.0", dispatch=False,
                            params_subset={"impl": ["baseline"], "BLOCK_N": [32], "VEC": [4], "num_warps": [2, 8]})
    assert job.variants_total == 2
    assert kernel_job_execute(job_id=job.pk) == "done"
    job.refresh_from_db()
    assert job.compiler.startswith("nvcc ") and job.builds_ok == 2
    for b in KernelBuild.objects.filter(variant__job=job):
        # q in shared memory (1024 floats) + the tile's scores and row ids
        assert b.shared_bytes == 1024 * 4 + 32 * 4 + 32 * 4
        assert 0 < b.registers <= 255 and b.spills_bytes == 0
        assert b.tensor_core is False and b.tensor_core_evidence == "none"
        assert "-gencode arch=compute_90a,code=sm_90a" in b.log and "-DBLOCK_N=32" in b.log


@pytest.mark.slow
@needs_nvcc
def test_it_builds_the_tiled_cuda_kernels_for_sm_90a_with_wgmma(real_packages, cpu_node):
    """The head-tiled and split-K kernels (tiled_sm90.cuh) go through nvcc for cc 9.0 as sm_90a and
    their facts are those of the heaviest tiled entry point: wgmma in the SASS, a register budget
    near the 255 cap (the 64 x 256 fp32 accumulator half is 128 registers a thread) and no spills;
    the baseline of the same job stays on the CUDA cores."""
    from kernels.manifest import grid_expand, manifest_load
    from kernels.runner.build import parse_ptxas

    pkg = kernel_package_register(path=real_packages / "sparse_mla_decode_cuda")
    # one variant per implementation: baseline (8 warps, 1 stage), head_tiled and split_k (2 stages)
    subset = {"impl": ["baseline", "head_tiled", "split_k"], "BLOCK_N": [64], "num_warps": [8], "VEC": [8],
              "STAGES": [1, 2], "NUM_SPLITS": ["auto"]}
    expected = grid_expand(manifest_load(real_packages / "sparse_mla_decode_cuda"), subset).variants
    assert sorted((v["impl"], v["STAGES"]) for v in expected) == [("baseline", 1), ("head_tiled", 2), ("split_k", 2)]
    job = kernel_job_create(package=pkg, node=cpu_node, cc="9.0", dispatch=False, params_subset=subset)
    assert job.variants_total == 3
    assert kernel_job_execute(job_id=job.pk) == "done"
    job.refresh_from_db()
    assert job.compiler.startswith("nvcc ") and (job.builds_ok, job.builds_failed, job.builds_discarded) == (3, 0, 0)
    builds = {b.variant.params["impl"]: b for b in KernelBuild.objects.filter(variant__job=job).select_related("variant")}
    assert sorted(builds) == ["baseline", "head_tiled", "split_k"]
    base = builds["baseline"]
    assert base.ok and base.tensor_core is False and base.tensor_core_evidence == "none"
    assert 0 < base.registers <= 255 and base.spills_bytes == 0 and "-Dimpl=baseline" in base.log
    for impl in ("head_tiled", "split_k"):
        b = builds[impl]
        assert b.ok and not b.discarded, (impl, b.error, b.discard_reason)
        assert b.tensor_core is True and b.tensor_core_evidence in ("wgmma", "mma"), (impl, b.tensor_core_evidence)
        assert 128 <= b.registers <= 255 and b.spills_bytes == 0, (impl, b.registers, b.spills_bytes)
        assert "-gencode arch=compute_90a,code=sm_90a" in b.log and f"-Dimpl={impl}" in b.log
        assert "-DBLOCK_N=64" in b.log and "-DSTAGES=2" in b.log
        # the facts are the heavier tiled entry point's (d512 / d576), not the split-K combine kernel's
        funcs = parse_ptxas(b.log)
        tiled = [funcs[f"sparse_mla_decode_tiled_d{d}"] for d in (512, 576)]
        assert b.registers == max(f["registers"] for f in tiled)
        assert b.registers > funcs["sparse_mla_combine_splits"]["registers"]
    assert "-Dimpl=head_tiled" in builds["head_tiled"].log


@pytest.mark.slow
@needs_triton
def test_a_job_on_a_gpu_node_benchmarks_and_fails_with_the_runners_reason_when_no_gpu_answers(
        real_packages, h200_node):
    """The node's rows say it has H200s, so the job goes on to benchmark; on a machine whose
    PyTorch sees no GPU the runner refuses, and the job says why."""
    if _gpu_present():
        pytest.skip("a GPU is present: the benchmark would run")
    pkg = _flagship(real_packages)
    job = kernel_job_create(package=pkg, node=h200_node, dispatch=False,
                            params_subset={"impl": ["baseline"], "BLOCK_N": [16], "num_warps": [4]},
                            shapes=["v4-flash"], batches=[1])
    assert job.target_cc == "9.0"
    assert kernel_job_execute(job_id=job.pk) == "failed"
    job.refresh_from_db()
    assert job.phase == "bench" and job.builds_ok == 1
    assert "the runner exited with status 2" in job.reason and "no CUDA GPU is visible to PyTorch" in job.reason


@pytest.mark.gpu
@pytest.mark.slow
@needs_triton
def test_it_measures_and_picks_a_best_variant_on_a_gpu(real_packages, h200_node):
    if not _gpu_present():
        pytest.skip("no CUDA GPU visible to PyTorch here")
    import torch

    props = torch.cuda.get_device_properties(0)
    cc = f"{props.major}.{props.minor}"
    h200_node.gpus.update(compute_capability=cc, name=torch.cuda.get_device_name(0))
    pkg = _flagship(real_packages)
    job = kernel_job_create(package=pkg, node=h200_node, cc=cc, dispatch=False, shapes=["v4-flash"], batches=[1],
                            params_subset={"impl": ["baseline", "head_tiled"], "BLOCK_H": [16], "BLOCK_N": [32],
                                           "num_warps": [4], "num_stages": [1]})
    assert kernel_job_execute(job_id=job.pk) == "done"
    job.refresh_from_db()
    assert job.hbm_gbps > 100 and job.bf16_tflops > 1 and job.benchmarks_correct == 2
    assert job.best.count() == 1 and job.config_paths


@pytest.mark.slow
@needs_nvcc
def test_cancelling_a_running_job_stops_the_runner_and_keeps_its_builds(real_packages, cpu_node, transactional_db,
                                                                        settings):
    pkg = kernel_package_register(path=real_packages / "sparse_mla_decode_cuda")
    job = kernel_job_create(package=pkg, node=cpu_node, cc="9.0", dispatch=False)
    assert job.variants_total >= 20  # long enough to be cancelled in the middle
    outcome: dict = {}
    worker = threading.Thread(target=lambda: outcome.setdefault("status", kernel_job_execute(job_id=job.pk)))
    worker.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status == "building" and job.progress_done >= 1:
            break
        time.sleep(0.2)
    assert job.status == "building", job.reason
    asked = time.monotonic()
    kernel_job_cancel(job=job)
    worker.join(timeout=60)
    assert not worker.is_alive()
    took = time.monotonic() - asked
    job.refresh_from_db()
    assert outcome["status"] == "cancelled" and job.status == "cancelled"
    assert job.reason == "cancelled on request" and took < 15  # no user: the cancel came from code
    # The builds finished before the cancel are kept (stored as they completed), not thrown away.
    stored = KernelBuild.objects.filter(variant__job=job)
    assert 1 <= stored.count() < job.variants_total
    assert (job.builds_ok + job.builds_failed) == stored.count()
    # the compile's time until the cancel is kept; built_at stays empty (the step did not finish)
    assert 0 < job.build_s < took + 120 and job.built_at is None
    from kernels.selectors import variant_table

    assert variant_table(job=job, state="built").total == stored.filter(ok=True, discarded=False).count()
    work = settings.VAR_DIR / "kernels" / "jobs" / str(job.pk)
    assert (work / "builds.json.partial").is_file() and not (work / "builds.json").exists()
    with pytest.raises(Conflict, match="already cancelled"):
        kernel_job_cancel(job=job)


def test_the_job_state_machine_claims_once_and_honours_early_cancels(toy_package, cpu_node):
    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    kernel_job_cancel(job=job)
    job.refresh_from_db()
    assert job.status == "cancelled" and job.reason == "cancelled before it started" and job.cancel_requested
    assert kernel_job_execute(job_id=job.pk) == "cancelled"  # a late delivery does nothing
    other = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    KernelJob.objects.filter(pk=other.pk).update(status="building")
    assert kernel_job_execute(job_id=other.pk) == "building"  # claimed elsewhere: left alone
    assert kernel_jobs_reap(stale_after_s=0) == 1
    other.refresh_from_db()
    assert other.status == "failed" and "the node agent running it stopped" in other.reason


@needs_triton
def test_it_fails_with_the_runners_reason_when_the_package_is_broken(toy_package, packages_root, cpu_node):
    (packages_root / "toy_attn" / "kernel.py").unlink()
    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    assert kernel_job_execute(job_id=job.pk) == "failed"
    job.refresh_from_db()
    assert job.reason.startswith("the runner exited with status 2:")
    assert "'kernel.py' is not a file inside the package" in job.reason
    assert job.ended_at is not None


def test_it_fails_with_a_clear_reason_when_the_runner_python_is_misconfigured(toy_package, cpu_node, settings):
    settings.CEILING_KERNEL_PYTHON = "python3"
    job = kernel_job_create(package=toy_package, node=cpu_node, cc="9.0", dispatch=False)
    assert kernel_job_execute(job_id=job.pk) == "failed"
    job.refresh_from_db()
    assert job.reason == "CEILING_KERNEL_PYTHON 'python3' is not an absolute path to an executable"


def test_a_cuda_job_for_another_target_leaves_out_the_variants_that_need_sm_90a(db, settings, tmp_path, viewer):
    """The CUDA package's tiled kernels are sm_90a wgmma code (``[cuda].requires``): a job for
    cc 12.0 builds the baseline variants alone and says how many it left out; an explicit
    variant list naming a tiled one is refused for that target."""
    from kernels.manifest import variant_shown
    from kernels.services import kernel_job_create, kernel_package_register
    from kernels.tests.conftest import REAL_PACKAGES

    settings.CEILING_KERNEL_CONFIG_DIR = tmp_path / "configs"
    pkg = kernel_package_register(path=REAL_PACKAGES / "sparse_mla_decode_cuda")
    hopper = kernel_job_create(package=pkg, node=None, cc="9.0", dispatch=False)
    blackwell = kernel_job_create(package=pkg, node=None, cc="12.0", dispatch=False)
    impls = {v.params["impl"] for v in blackwell.variants.all()}
    assert impls == {"baseline"}
    assert {v.params["impl"] for v in hopper.variants.all()} == {"baseline", "head_tiled", "split_k"}
    baseline = sum(1 for v in hopper.variants.all() if v.params["impl"] == "baseline")
    assert blackwell.variants.count() == baseline
    left_out = [p for p in blackwell.grid_summary["pruned"] if p["source"] == "cuda.requires"]
    assert left_out == [{"index": None, "source": "cuda.requires", "constraint": "impl == 'baseline' or cc == 90 (target cc 12.0)",
                         "pruned": hopper.variants.count() - baseline}]
    tiled = next(v.params for v in hopper.variants.all() if v.params["impl"] == "head_tiled")
    with pytest.raises(InvalidInput) as err:
        kernel_job_create(package=pkg, node=None, cc="12.0", dispatch=False, only=[tiled])
    assert err.value.errors["variants"] == [
        f"variants.0: {variant_shown(tiled)} is not in sparse_mla_decode_cuda's grid: [cuda].requires "
        "(impl == 'baseline' or cc == 90) refuses it for compute capability 12.0"]
    with pytest.raises(InvalidInput) as err:
        kernel_job_create(package=pkg, node=None, cc="12.0", dispatch=False, params_subset={"impl": ["split_k"]})
    assert "[cuda].requires (impl == 'baseline' or cc == 90) for compute capability 12.0" in err.value.errors["variants"][0]
    from django.test import Client

    page = Client()
    page.force_login(viewer)
    html = page.get(f"/kernels/jobs/{blackwell.pk}/").content.decode()
    assert (f"{hopper.variants.count() - baseline} left out: this target cannot build them (<code>impl == "
            "&#x27;baseline&#x27; or cc == 90 (target cc 12.0)</code>)") in html
