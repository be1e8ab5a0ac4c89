"""``python -m kernels.runner compile``: build facts without a GPU, for Triton (to sm_90a) and for
CUDA C++ through nvcc, run as the control plane runs it (a subprocess with an argv list)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = REPO / "kernels" / "packages" / "sparse_mla_decode"
BUILD_KEYS = {"variant_id", "ok", "error", "registers", "spills_bytes", "shared_bytes", "tensor_core",
              "tensor_core_evidence", "build_s", "compiler", "log"}


def run_runner(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "kernels.runner", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def run_script(script: str, cases: list, timeout=600) -> list:
    """Run ``script`` in a fresh Python (e.g. one that switches Triton's interpreter on before Triton
    is imported) with ``cases`` as JSON in argv[1]; return the JSON of its last stdout line."""
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def progress_lines(stdout: str) -> list[dict]:
    return [json.loads(line)["progress"] for line in stdout.splitlines() if line.strip()]


@pytest.mark.slow
def test_it_compiles_triton_variants_for_hopper_without_a_gpu(tmp_path):
    pytest.importorskip("triton")
    variants = [
        {"variant_id": 1, "params": {"impl": "baseline", "BLOCK_H": 16, "BLOCK_N": 16, "num_warps": 4,
                                     "num_stages": 1, "NUM_SPLITS": "auto"}},
        {"variant_id": 2, "params": {"impl": "head_tiled", "BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4,
                                     "num_stages": 2, "NUM_SPLITS": "auto"}},
        {"variant_id": "wide", "params": {"impl": "split_k", "BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8,
                                          "num_stages": 2, "NUM_SPLITS": "auto"}},
        {"variant_id": 4, "params": {"impl": "sideways"}},
    ]
    (tmp_path / "variants.json").write_text(json.dumps(variants))
    proc = run_runner("compile", "--package", FLAGSHIP, "--variants", tmp_path / "variants.json",
                      "--target", "cuda:90", "--out", tmp_path / "builds.json")
    assert proc.returncode == 0, proc.stderr
    assert progress_lines(proc.stdout)[-1] == {"done": 4, "total": 4}
    builds = {b["variant_id"]: b for b in json.loads((tmp_path / "builds.json").read_text())}
    assert all(set(b) == BUILD_KEYS for b in builds.values())
    baseline, tiled, wide, bad = builds[1], builds[2], builds["wide"], builds[4]
    assert baseline["ok"] and baseline["tensor_core"] is False and baseline["tensor_core_evidence"] == "none"
    assert tiled["ok"] and tiled["tensor_core"] is True and tiled["tensor_core_evidence"] in ("mma", "wgmma")
    # a 64-head tile is one warp-group MMA tile: Hopper's wgmma
    assert wide["ok"] and wide["tensor_core_evidence"] == "wgmma"
    for b in (baseline, tiled, wide):
        assert 0 < b["registers"] <= 255
        assert b["spills_bytes"] == 0
        assert b["shared_bytes"] > 0 and b["build_s"] > 0
        assert b["compiler"].startswith("triton 3.")
        assert "v32/" in b["log"] and "v4-flash/" in b["log"]
    # the q tile and the pipelined KV tiles of the wide variant are in shared memory
    assert wide["shared_bytes"] >= 64 * 576 * 2 + 2 * 32 * 576 * 2
    assert bad["ok"] is False and "impl must be one of" in bad["error"]


def test_it_refuses_a_bad_target_and_a_missing_package(tmp_path):
    (tmp_path / "variants.json").write_text("[]")
    proc = run_runner("compile", "--package", FLAGSHIP, "--variants", tmp_path / "variants.json",
                      "--target", "volta", "--out", tmp_path / "b.json")
    assert proc.returncode == 2 and "cuda:90" in proc.stderr
    proc = run_runner("compile", "--package", tmp_path / "nope", "--variants", tmp_path / "variants.json",
                      "--target", "cuda:90", "--out", tmp_path / "b.json")
    assert proc.returncode == 2 and "no manifest.toml" in proc.stderr
    assert not (tmp_path / "b.json").exists()


CUDA_SOURCE = r"""
#include <mma.h>
using namespace nvcuda;
#ifndef TILE
#error TILE must be defined
#endif
extern "C" __global__ void tile_gemm(const half *a, const half *b, float *c) {
    __shared__ float staging[TILE * 64];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(staging, fc, 16, wmma::mem_row_major);
    c[threadIdx.x] = staging[threadIdx.x];
}
extern "C" __global__ void plain_add(float *x) { x[threadIdx.x] += 1.0f; }
"""


def _cuda_package(tmp_path: Path, source: str) -> Path:
    root = tmp_path / "tile_gemm"
    root.mkdir()
    (root / "kernel.cu").write_text(source)
    (root / "reference.py").write_text("def reference(inputs):\n    return None\n")
    (root / "manifest.toml").write_text("""
name = "tile_gemm"
title = "one wmma tile"
language = "cuda"
sources = ["kernel.cu"]
reference = "reference.py:reference"
entry = "kernel.cu"
[grid]
TILE = [4, 8]
[[shapes]]
name = "one"
heads = 1
d_qk = 16
d_v = 16
topk = 16
batches = [1]
[tolerance]
atol = 1e-3
rtol = 1e-3
[cost]
bytes = "batch * 16 * 16 * 8"
flops = "batch * 2 * 16 * 16 * 16"
[cuda]
kernel = "tile_gemm"
nvcc_flags = ["-O3"]
defines = ["TILE"]
""")
    return root


@pytest.mark.slow
def test_it_builds_a_cuda_variant_with_nvcc_and_reads_ptxas_and_sass(tmp_path):
    from kernels.runner.build import find_tool

    if not find_tool("nvcc"):
        pytest.skip("nvcc is not installed here")
    root = _cuda_package(tmp_path, CUDA_SOURCE)
    (tmp_path / "variants.json").write_text(json.dumps([
        {"variant_id": 7, "params": {"TILE": 8}},
        {"variant_id": 8, "params": {"TILE": "8; rm -rf /"}},
        {"variant_id": 9, "params": {}},
    ]))
    proc = run_runner("compile", "--package", root, "--variants", tmp_path / "variants.json",
                      "--target", "cuda:90", "--out", tmp_path / "builds.json")
    assert proc.returncode == 0, proc.stderr
    ok, unsafe, missing = json.loads((tmp_path / "builds.json").read_text())
    assert set(ok) == BUILD_KEYS
    assert ok["ok"] is True and ok["error"] is None, ok["log"]
    assert ok["compiler"].startswith("nvcc ")
    assert ok["shared_bytes"] == 8 * 64 * 4                     # staging[TILE * 64] floats, TILE = 8
    assert ok["registers"] > 0 and ok["spills_bytes"] == 0
    assert ok["tensor_core"] is True and ok["tensor_core_evidence"] in ("mma", "wgmma")
    assert "-DTILE=8" in ok["log"] and "arch=compute_90a,code=sm_90a" in ok["log"]
    assert unsafe["ok"] is False and "not a plain name=value token" in unsafe["error"]
    assert missing["ok"] is False and "lack" in missing["error"]


@pytest.mark.slow
def test_it_reports_the_compiler_error_of_a_cuda_variant(tmp_path):
    from kernels.runner.build import find_tool

    if not find_tool("nvcc"):
        pytest.skip("nvcc is not installed here")
    root = _cuda_package(tmp_path, CUDA_SOURCE.replace("c[threadIdx.x] =", "c[threadIdx.x] = undeclared +"))
    (tmp_path / "variants.json").write_text(json.dumps([{"variant_id": 1, "params": {"TILE": 4}}]))
    proc = run_runner("compile", "--package", root, "--variants", tmp_path / "variants.json",
                      "--target", "cuda:90", "--out", tmp_path / "builds.json")
    assert proc.returncode == 0, proc.stderr
    (build,) = json.loads((tmp_path / "builds.json").read_text())
    assert build["ok"] is False and "undeclared" in build["error"]
    assert build["registers"] is None and build["tensor_core"] is None


def test_it_applies_the_manifests_cuda_requires_to_a_variants_file_given_by_hand(tmp_path):
    """The control plane leaves out the variants ``[cuda] requires`` refuses for the target; the
    runner, given such a variant directly, records the same rule as the reason and runs no compiler."""
    root = _cuda_package(tmp_path, CUDA_SOURCE)
    manifest = root / "manifest.toml"
    manifest.write_text(manifest.read_text() + 'requires = "TILE == 4 or cc == 90"\n')
    (tmp_path / "variants.json").write_text(json.dumps([
        {"variant_id": 1, "params": {"TILE": 8}},
        {"variant_id": 2, "params": {"TILES": 8}},
    ]))
    proc = run_runner("compile", "--package", root, "--variants", tmp_path / "variants.json",
                      "--target", "cuda:120", "--out", tmp_path / "builds.json")
    assert proc.returncode == 0, proc.stderr
    refused, unknown = json.loads((tmp_path / "builds.json").read_text())
    assert refused["ok"] is False and refused["log"] == "" and refused["registers"] is None
    assert refused["error"] == ("not built for compute capability 12.0: [cuda] requires "
                                "(TILE == 4 or cc == 90) is false for this variant")
    assert unknown["ok"] is False and unknown["error"].startswith("[cuda] requires: ") and "TILE" in unknown["error"]


def test_it_refuses_to_bench_without_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present here")
    (tmp_path / "variants.json").write_text(json.dumps([{"variant_id": 1, "params": {"impl": "baseline"}}]))
    proc = run_runner("bench", "--package", FLAGSHIP, "--variants", tmp_path / "variants.json",
                      "--out", tmp_path / "results.json")
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr
    assert not (tmp_path / "results.json").exists()
