"""A kernel job goes through the real path: the service enqueues it on ``node.<name>`` after the
transaction commits, a real node agent (``manage.py node_agent``, a Celery worker on that queue
with real Redis) picks it up, runs the runner as a subprocess and writes the row."""
import shutil

import pytest

from deployments.tests.test_agent_support import agent_env, agents, node_of, wait_for  # noqa: F401 - fixtures
from kernels.models import KernelBuild, KernelJob
from kernels.services import kernel_job_cancel, kernel_job_create, kernel_package_register
from kernels.tests.conftest import REAL_PACKAGES

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")]


def test_the_node_agent_runs_a_kernel_job_from_its_queue(agents, tmp_path, settings):
    settings.CEILING_KERNEL_PACKAGES_DIR = str(REAL_PACKAGES)
    agent = agents(CEILING_VAR_DIR=str(tmp_path / "var"))
    node = node_of(agent)
    pkg = kernel_package_register(path=REAL_PACKAGES / "sparse_mla_decode_cuda")
    # two CUDA-core baselines (4 and 8 warps) and the wgmma head-tiled kernel (8 warps, 2 stages)
    job = kernel_job_create(package=pkg, node=node, cc="9.0",
                            params_subset={"impl": ["baseline", "head_tiled"], "BLOCK_N": [64], "VEC": [8],
                                           "num_warps": [4, 8]})
    assert job.variants_total == 3
    done = wait_for(lambda: KernelJob.objects.filter(pk=job.pk, status__in=["done", "failed"]).first(),
                    timeout_s=180, what="the kernel job to finish on the agent")
    assert done.status == "done", done.reason + "\n" + agent.log_text()[-3000:]
    assert done.note == f"no GPU on node {node.name}: builds only" or "its GPUs are compute capability" in done.note
    assert KernelBuild.objects.filter(variant__job=job, ok=True).count() == 3
    built = {(b.variant.params["impl"], b.variant.params["num_warps"]): b
             for b in KernelBuild.objects.filter(variant__job=job).select_related("variant")}
    assert sorted(built) == [("baseline", 4), ("baseline", 8), ("head_tiled", 8)]
    assert built[("head_tiled", 8)].tensor_core is True and built[("baseline", 4)].tensor_core is False
    assert (tmp_path / "var" / "kernels" / "jobs" / str(job.pk) / "builds.json").is_file()
    # a job cancelled right after it was queued ends cancelled, whether or not the agent had claimed it
    later = kernel_job_create(package=pkg, node=node, cc="9.0", params_subset={"impl": ["baseline"], "BLOCK_N": [128]})
    kernel_job_cancel(job=later)
    ended = wait_for(lambda: KernelJob.objects.filter(pk=later.pk, status__in=["done", "failed", "cancelled"]).first(),
                     timeout_s=60, what="the cancelled job to end")
    assert ended.status == "cancelled" and ended.reason in ("cancelled before it started", "cancelled on request")
    assert not KernelBuild.objects.filter(variant__job=later).exists()
