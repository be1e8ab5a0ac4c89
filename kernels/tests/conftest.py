"""Fixtures of the control-plane kernel tests: a packages directory holding a small test package
written per test, nodes with and without a GPU, and JSON payloads shaped like the runner's
``builds.json`` / ``results.json`` (the runner's own contract)."""
from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings

REPO = Path(settings.BASE_DIR)
REAL_PACKAGES = REPO / "kernels" / "packages"
#: The packages whose jobs were measured on an H200 and are stored under ``results/``.
STORED_H200_PACKAGES = ("sparse_mla_decode", "sparse_mla_decode_cuda", "sparse_mla_decode_fp8")


def stored_jobs_ingest() -> None:
    """Register :data:`STORED_H200_PACKAGES` and ingest their stored H200 jobs (results, variants
    and build facts) as ``make demo`` does, through ``manage.py kernel_job_ingest --new``."""
    from io import StringIO

    from django.core.management import call_command

    from kernels.services import kernel_package_register

    for name in STORED_H200_PACKAGES:
        kernel_package_register(path=REAL_PACKAGES / name)
        results = REAL_PACKAGES / name / "results"
        call_command("kernel_job_ingest", str(results / "h200-results.json"), new=name,
                     variants=str(results / "h200-variants.json"), builds=str(results / "sm90a-builds.json"),
                     stdout=StringIO())

TEST_MANIFEST = '''
name = "toy_attn"
title = "A toy package for the control-plane tests"
language = "triton"
description = "Two implementations, a small grid."
sources = ["kernel.py", "reference.py"]
reference = "reference.py:reference"
entry = "kernel.py"

[grid]
impl = ["baseline", "tiled"]
BLOCK = [16, 32, 64]
num_warps = [4, 8]
constraints = [
  "impl != 'baseline' or BLOCK == 16",
  "BLOCK * num_warps <= 256",
]

[[shapes]]
name = "small"
heads = 8
d_qk = 64
d_v = 64
topk = 128
batches = [1, 4]

[[shapes]]
name = "wide"
heads = 16
d_qk = 128
d_v = 128
topk = 256
batches = [1, 4]

[tolerance]
atol = 0.02
rtol = 0.02

[cost]
bytes = "batch * topk * d_qk * 2 + batch * heads * (d_qk + d_v) * 2"
flops = "2 * batch * heads * topk * (d_qk + d_v)"

[engine]
env = "CEILING_TOY_ATTN_CONFIG"
flag = ""
'''


def write_package(root: Path, name: str = "toy_attn", manifest: str = TEST_MANIFEST) -> Path:
    """Write a package directory ``root/name`` with ``manifest`` and two small source files."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.toml").write_text(manifest)
    (d / "kernel.py").write_text("def launch(params, inputs):\n    return None\n")
    (d / "reference.py").write_text("def reference(inputs):\n    return None\n")
    return d


@pytest.fixture
def packages_root(tmp_path, settings) -> Path:
    """A packages directory of this test (``CEILING_KERNEL_PACKAGES_DIR``) with ``toy_attn`` in it;
    exported configs go to the test's own directory too."""
    root = tmp_path / "packages"
    write_package(root)
    settings.CEILING_KERNEL_PACKAGES_DIR = str(root)
    settings.CEILING_KERNEL_CONFIG_DIR = str(tmp_path / "configs")
    settings.VAR_DIR = tmp_path / "var"
    return root


@pytest.fixture
def real_packages(tmp_path, settings) -> Path:
    """The repository's packages (the real runner needs their sources), exported configs and job
    work directories under the test's directory."""
    settings.CEILING_KERNEL_PACKAGES_DIR = str(REAL_PACKAGES)
    settings.CEILING_KERNEL_CONFIG_DIR = str(tmp_path / "configs")
    settings.VAR_DIR = tmp_path / "var"
    return REAL_PACKAGES


@pytest.fixture
def toy_package(db, packages_root):
    from kernels.services import kernel_package_register

    return kernel_package_register(path=packages_root / "toy_attn")


# toy_attn with a parameter whose values mix text and numbers, as sparse_mla_decode's NUM_SPLITS
# does: the baseline runs with "auto" only; the tiled kernel with every value (10 variants).
SPLIT_MANIFEST = (TEST_MANIFEST.replace('name = "toy_attn"', 'name = "split_attn"')
                  .replace("num_warps = [4, 8]", 'NUM_SPLITS = ["auto", 2, 8]')
                  .replace('"BLOCK * num_warps <= 256"', '"impl == \'tiled\' or NUM_SPLITS == \'auto\'"')
                  .replace("CEILING_TOY_ATTN_CONFIG", "CEILING_SPLIT_ATTN_CONFIG"))


@pytest.fixture
def split_package(db, packages_root):
    """``split_attn`` (:data:`SPLIT_MANIFEST`) registered next to toy_attn."""
    from kernels.services import kernel_package_register

    return kernel_package_register(path=write_package(packages_root, "split_attn", SPLIT_MANIFEST))


@pytest.fixture
def cpu_node(db):
    from deployments.tests.factories import cpu_node_create

    return cpu_node_create(name="cpu-box")


@pytest.fixture
def h200_node(db):
    """A node with two H200 GPUs (compute capability 9.0), as the fixture host's nvidia-smi shows."""
    from deployments.models import Gpu, Node, NumaNode

    node = Node.objects.create(name="h200-box", hostname="h200-box", cpu_count=32, memory_total_bytes=256 * 2**30)
    NumaNode.objects.create(node=node, index=0, cpus="0-31")
    for i in range(2):
        Gpu.objects.create(node=node, index=i, name="NVIDIA H200", compute_capability="9.0",
                           memory_total_bytes=143771 * 2**20, numa_node=0)
    return node


def build_fact(variant_id, *, ok=True, registers=128, spills=0, shared=32768, evidence="mma", error=None):
    """One item of the runner's builds.json."""
    return {"variant_id": variant_id, "ok": ok, "error": error, "registers": registers if ok else None,
            "spills_bytes": spills if ok else None, "shared_bytes": shared if ok else None,
            "tensor_core": (evidence != "none") if ok else None, "tensor_core_evidence": evidence,
            "build_s": 1.25, "compiler": "triton 3.6.0", "log": "ptxas info: ..."}


class StandInRunner:
    """``runner_run`` for the job tests: every variant of the job builds (its build facts are the
    payload, whatever the step). It records the runner step of each call (``steps``: "compile",
    "bench") and the job each call was for (``ran``); a callable in ``during[job_id]`` runs once,
    inside the next call for that job, i.e. while the job is "building" and holds its node."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.ran: list[int] = []
        self.during: dict[int, Callable[[], object]] = {}

    def __call__(self, argv, *, out, **_kw):
        from kernels.models import KernelVariant
        from kernels.runnercall import RunnerOutcome

        job_id = int(Path(out).parent.name)
        self.steps.append(argv[argv.index("kernels.runner") + 1])
        self.ran.append(job_id)
        hook = self.during.pop(job_id, None)
        if hook is not None:
            hook()
        facts = [build_fact(pk) for pk in KernelVariant.objects.filter(job_id=job_id).values_list("pk", flat=True)]
        return RunnerOutcome(payload=facts, wall_s=0.25)


@pytest.fixture
def runner(monkeypatch) -> StandInRunner:
    """:class:`StandInRunner` in place of the jobs' ``runner_run``."""
    fake = StandInRunner()
    monkeypatch.setattr("kernels.services.jobs.runner_run", fake)
    return fake


@pytest.fixture
def sent(monkeypatch) -> list[dict]:
    """Messages of ``kernel_job_run_task`` captured instead of published, as they would be sent:
    args, kwargs, queue, countdown."""
    from kernels.tasks import kernel_job_run_task

    calls: list[dict] = []

    def capture(args=None, kwargs=None, **options):
        calls.append({"args": list(args or []), "kwargs": dict(kwargs or {}), "queue": options.get("queue"),
                      "countdown": options.get("countdown")})

    monkeypatch.setattr(kernel_job_run_task, "apply_async", capture)
    return calls


@pytest.fixture
def online(cpu_node):
    """cpu-box with a fresh agent heartbeat (a waiting reason about the agent would hide the rest)."""
    from django.utils import timezone

    cpu_node.agent_heartbeat_at = timezone.now()
    cpu_node.save(update_fields=["agent_heartbeat_at"])
    return cpu_node


def result_row(variant_id, shape, batch, *, median_us, correct=True, **extra):
    """One item of the runner's results.json ``results`` list (times in µs)."""
    row = {"variant_id": variant_id, "shape": shape, "batch": batch, "correct": correct, "max_abs_err": 0.004,
           "max_rel_err": 0.01, "error": None, "median_us": median_us if correct else None,
           "p10_us": median_us * 0.98 if correct else None, "p90_us": median_us * 1.05 if correct else None,
           "min_us": median_us * 0.95 if correct else None, "reps": 200 if correct else None,
           "gbps": None, "tflops": None, "roofline_us": None, "roofline_fraction": None, "bound": None}
    row.update(extra)
    return row


H200_DEVICE = {"name": "NVIDIA H200", "cc": "9.0", "sm_count": 132, "l2_bytes": 52428800, "hbm_gbps": 4000.0,
               "bf16_tflops": 700.0, "driver": "580.159.04", "cuda": "13.0", "torch": "2.9.0", "triton": "3.6.0"}


@pytest.fixture
def copy_real_package(tmp_path):
    """Copy one of the repository's packages into a directory of this test (to edit it)."""

    def copy(name: str, dest_root: Path) -> Path:
        dest = dest_root / name
        shutil.copytree(REAL_PACKAGES / name, dest)
        return dest

    return copy


BASE = "impl=baseline,BLOCK=16,num_warps=4"
T32 = "impl=tiled,BLOCK=32,num_warps=4"
T64 = "impl=tiled,BLOCK=64,num_warps=4"


@pytest.fixture
def measured_job(toy_package, h200_node):
    """A done job of toy_attn on the H200 node: builds (one discarded for spilling, one failed) and
    results for both shapes at batches 1 and 4 (tiled BLOCK 32 fastest, 4x the baseline; one
    variant wrong at small/1)."""
    from kernels.models import KernelJob
    from kernels.services import kernel_builds_store, kernel_job_create, kernel_results_store

    job = kernel_job_create(package=toy_package, node=h200_node, dispatch=False)
    ids = {v.key: v.pk for v in job.variants.all()}
    facts = [build_fact(pk) for key, pk in ids.items() if key not in (T64, "impl=tiled,BLOCK=16,num_warps=8")]
    facts += [build_fact(ids[T64], spills=64), build_fact(ids["impl=tiled,BLOCK=16,num_warps=8"], ok=False,
                                                             error="CompilationError: boom")]
    kernel_builds_store(job_id=job.pk, payload=facts)
    rows = []
    for shape in ("small", "wide"):
        for batch, scale in ((1, 1.0), (4, 3.0)):
            rows += [result_row(ids[BASE], shape, batch, median_us=40.0 * scale),
                     result_row(ids[T32], shape, batch, median_us=10.0 * scale),
                     result_row(ids["impl=tiled,BLOCK=32,num_warps=8"], shape, batch, median_us=12.0 * scale)]
    rows.append(result_row(ids["impl=tiled,BLOCK=16,num_warps=4"], "small", 1, median_us=1.0, correct=False))
    kernel_results_store(job_id=job.pk, payload={"device": H200_DEVICE, "results": rows})
    KernelJob.objects.filter(pk=job.pk).update(status="done")
    job.refresh_from_db()
    return job


@pytest.fixture
def seed_pd_sweep(db):
    """A finished sim PD sweep of the seed profile (DeepSeek-V4-Flash) with its one c=1 256/256
    point as the seed measured it: 9.95 tok/s, mean TTFT 893 ms, mean TPOT 94 ms."""
    from benchmarks.models import BenchmarkRun, BenchmarkSweep

    sweep = BenchmarkSweep.objects.create(name="seed pd", engine="sim", topology="pd", status="done",
                                          served_model_name="DeepSeek-V4-Flash",
                                          snapshot={"spec": {"sim": {"profile": "seed-sm120-fallback"}}})
    BenchmarkRun.objects.create(sweep=sweep, status="done", concurrency=1, input_len=256, output_len=256,
                                summary={"output_throughput_tok_s": 9.95, "ttft_ms": {"mean": 893.0},
                                         "tpot_ms": {"mean": 94.0}})
    return sweep


@pytest.fixture
def jobs(toy_package) -> list[int]:
    """25 done jobs of toy_attn; their ids, newest first."""
    from kernels.models import KernelJob

    made = [KernelJob.objects.create(package=toy_package, target_cc="9.0", status="done") for _ in range(25)]
    return [j.pk for j in reversed(made)]


def listed(html: str) -> list[int]:
    """The job ids a kernels page links to (``href="/kernels/jobs/<id>/">#``), in page order."""
    return [int(x) for x in re.findall(r'href="/kernels/jobs/(\d+)/">#', html)]
