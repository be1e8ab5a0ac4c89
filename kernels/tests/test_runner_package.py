"""Manifest parsing by the runner, the flagship's cost formulas against hand-computed numbers,
and the pure functions of the bench (roofline, percentiles, rotation, comparison)."""
import hashlib
import json
import math
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernels.runner import bench
from kernels.runner.build import arch_name, parse_ptxas, parse_target, tensor_core_evidence
from kernels.runner.package import PackageError, load_package, load_variants, variants_sha256

FLAGSHIP = Path(__file__).resolve().parents[1] / "packages" / "sparse_mla_decode"


def test_it_reads_the_flagship_manifest():
    pkg = load_package(FLAGSHIP)
    assert (pkg.name, pkg.language, pkg.entry, pkg.reference) == (
        "sparse_mla_decode", "triton", "kernel.py", "reference.py:reference")
    v4, v32 = pkg.shape("v4-flash"), pkg.shape("v32")
    assert (v4["heads"], v4["d_qk"], v4["d_v"], v4["topk"]) == (64, 512, 512, 640)
    assert (v32["heads"], v32["d_qk"], v32["d_v"], v32["topk"]) == (128, 576, 512, 2048)
    assert v4["batches"] == v32["batches"] == [1, 2, 4, 8, 16, 32, 64]
    assert pkg.grid["impl"] == ["baseline", "head_tiled", "split_k"]
    assert pkg.manifest["engine"]["env"] == "CEILING_SPARSE_MLA_CONFIG"
    assert pkg.tolerance == {"atol": 2e-2, "rtol": 2e-2}


def test_it_computes_bytes_and_flops_per_call_as_by_hand():
    pkg = load_package(FLAGSHIP)
    # v4-flash, batch 1: 640 rows x 512 x 2 B + q and out 64 x 512 x 2 B each + 640 int32 indices
    assert pkg.cost_of(pkg.shape("v4-flash"), 1) == (655360 + 65536 + 65536 + 2560, 2 * 64 * 640 * 1024)
    # v32, batch 64: 64 x 2048 rows x 576 x 2 B + q 64 x 128 x 576 x 2 + out 64 x 128 x 512 x 2 + indices
    nbytes, flops = pkg.cost_of(pkg.shape("v32"), 64)
    assert nbytes == 150994944 + 9437184 + 8388608 + 524288
    assert flops == 2 * 64 * 128 * 2048 * (576 + 512) == 36507222016


def _copy_package(tmp_path: Path) -> Path:
    dest = tmp_path / "sparse_mla_decode"
    shutil.copytree(FLAGSHIP, dest, ignore=shutil.ignore_patterns("results", "__pycache__"))
    return dest


@pytest.mark.parametrize("old, new, message", [
    ('name = "sparse_mla_decode"', 'name = "other"', "must equal the directory name"),
    ('language = "triton"', 'language = "rust"', "language must be"),
    ('entry = "kernel.py"', 'entry = "missing.py"', "is not a file inside the package"),
    ('entry = "kernel.py"', 'entry = "../../etc/passwd"', "is not a file inside the package"),
    ('reference = "reference.py:reference"', 'reference = "reference.py"', "file.py:function"),
    ('heads = 64', 'heads = 0', "heads must be positive"),
    ('batches = [1, 2, 4, 8, 16, 32, 64]\n\n[[shapes]]', 'batches = []\n\n[[shapes]]', "batches must be"),
    ('flops = "2 * batch', 'flops = "__import__(1) * batch', "may be called"),
    ('flops = "2 * batch', 'flops = "2 * nonsense * batch', "unknown name nonsense"),
])
def test_it_refuses_a_broken_manifest_with_the_reason(tmp_path, old, new, message):
    root = _copy_package(tmp_path)
    manifest = root / "manifest.toml"
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new, 1))
    with pytest.raises(PackageError, match=message):
        load_package(root)


def test_it_refuses_a_manifest_that_is_not_toml(tmp_path):
    root = _copy_package(tmp_path)
    (root / "manifest.toml").write_text("name = \n")
    with pytest.raises(PackageError, match="manifest.toml"):
        load_package(root)


def test_it_reads_variants_and_refuses_duplicates(tmp_path):
    path = tmp_path / "variants.json"
    path.write_text(json.dumps([{"variant_id": 1, "params": {"impl": "baseline"}},
                                {"variant_id": "b", "params": {}}]))
    assert [v["variant_id"] for v in load_variants(path)] == [1, "b"]
    path.write_text(json.dumps([{"variant_id": 1, "params": {}}, {"variant_id": 1, "params": {}}]))
    with pytest.raises(PackageError, match="appears twice"):
        load_variants(path)
    path.write_text(json.dumps({"variant_id": 1}))
    with pytest.raises(PackageError, match="JSON list"):
        load_variants(path)


def test_the_variants_fingerprint_is_the_sha256_of_the_canonical_list(tmp_path):
    variants = [{"variant_id": 2, "params": {"impl": "split_k", "BLOCK_H": 64}},
                {"variant_id": 1, "params": {"BLOCK_H": 16, "impl": "baseline"}}]
    canonical = ('[{"params":{"BLOCK_H":16,"impl":"baseline"},"variant_id":1},'
                 '{"params":{"BLOCK_H":64,"impl":"split_k"},"variant_id":2}]')
    assert variants_sha256(variants) == hashlib.sha256(canonical.encode()).hexdigest()
    # the order of the file and keys a runner adds (a CUDA variant's cubin path) do not count
    assert variants_sha256(variants[::-1]) == variants_sha256(variants)
    assert variants_sha256([dict(v, cubin="/tmp/v1.cubin") for v in variants]) == variants_sha256(variants)
    # the same ids meaning other parameters do
    swapped = [{"variant_id": 1, "params": variants[0]["params"]}, {"variant_id": 2, "params": variants[1]["params"]}]
    assert variants_sha256(swapped) != variants_sha256(variants)
    path = tmp_path / "variants.json"
    path.write_text(json.dumps(variants, indent=2))
    assert variants_sha256(load_variants(path)) == variants_sha256(variants)


def test_the_bench_records_the_fingerprint_of_the_variants_it_measured(tmp_path, monkeypatch):
    """``results.json`` carries ``variants_sha256`` of the list read from ``--variants``, from the
    first write on (a GPU-less stand-in for torch; calibration only, so nothing is launched)."""
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True, set_device=lambda i: None))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(bench, "device_facts", lambda torch, index=0: {"name": "NVIDIA H200", "cc": "9.0"})
    monkeypatch.setattr(bench, "measure_hbm_gbps", lambda torch: 4000.0)
    monkeypatch.setattr(bench, "measure_bf16_tflops", lambda torch: 700.0)
    path = tmp_path / "variants.json"
    path.write_text(json.dumps([{"variant_id": 7, "params": {"impl": "baseline", "BLOCK_H": 16}}]))
    out = tmp_path / "results.json"
    bench.run_bench(load_package(FLAGSHIP), load_variants(path), out, calibrate_only=True)
    written = json.loads(out.read_text())
    assert written["variants_sha256"] == variants_sha256(load_variants(path))
    assert written["device"]["hbm_gbps"] == 4000.0 and written["results"] == []
    bench.run_bench(load_package(FLAGSHIP), [], out, calibrate_only=True)
    assert "variants_sha256" not in json.loads(out.read_text())  # no variants, nothing to fingerprint


def test_it_takes_the_longer_of_the_memory_and_compute_times_as_the_roofline():
    # 4.8 GB at 4800 GB/s = 1000 us; 0.5 TFLOP at 1000 TFLOP/s = 500 us
    assert bench.roofline(4.8e9, 0.5e12, 4800.0, 1000.0) == pytest.approx((1000.0, "memory"))
    assert bench.roofline(4.8e8, 0.5e12, 4800.0, 1000.0) == pytest.approx((500.0, "compute"))


def test_it_rotates_enough_input_copies_to_flush_the_l2():
    l2 = 50 * 2**20
    assert bench.rotation_copies(788992, l2) == math.ceil(3 * l2 / 788992) == 200
    assert bench.rotation_copies(169345024, l2) == 2
    assert bench.rotation_copies(10, l2) == bench.MAX_COPIES


def test_it_interpolates_percentiles():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert bench.percentile(values, 0.5) == 3.0
    assert bench.percentile(values, 0.1) == pytest.approx(1.4)
    assert bench.percentile(values, 0.9) == pytest.approx(4.6)


def test_it_parses_ptxas_reports_per_function():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'other' for 'sm_90a'
ptxas info    : Function properties for other
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers, 380 bytes cmem[0]
ptxas info    : Compiling entry function '_Z4gemmPf' for 'sm_90a'
ptxas info    : Function properties for _Z4gemmPf
    16 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem, 400 bytes cmem[0]
"""
    funcs = parse_ptxas(log)
    assert funcs["other"] == {"registers": 12, "spill_stores": 0, "spill_loads": 0, "smem": 0}
    assert funcs["_Z4gemmPf"] == {"registers": 255, "spill_stores": 24, "spill_loads": 20, "smem": 49152}


def test_it_reads_tensor_core_evidence_from_ptx_and_sass():
    assert tensor_core_evidence("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16") == "wgmma"
    assert tensor_core_evidence("        /*0200*/  HGMMA.64x32x16.F32.BF16 gdesc[UR4], RZ") == "wgmma"
    assert tensor_core_evidence("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == "mma"
    assert tensor_core_evidence("        /*0100*/  HMMA.16816.F32.BF16 R4, R8, R12, R4 ;") == "mma"
    assert tensor_core_evidence("fma.rn.f32 %f1, %f2, %f3, %f4;") == "none"


def test_it_parses_targets():
    assert parse_target("cuda:90") == 90
    assert parse_target("cuda:9.0") == 90
    assert parse_target("120") == 120
    assert arch_name(90) == "sm_90a" and arch_name(80) == "sm_80"
    with pytest.raises(ValueError, match="cuda:90"):
        parse_target("hopper")
