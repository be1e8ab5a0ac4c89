"""Package manifests (kernels.manifest): validation with dotted field paths, and grid expansion
with per-constraint prune counts."""
import tomllib

import pytest

from kernels.manifest import ManifestError, grid_expand, manifest_load, manifest_validate, variant_key
from kernels.tests.conftest import REAL_PACKAGES, TEST_MANIFEST, write_package


def _raw(**changes):
    raw = tomllib.loads(TEST_MANIFEST)
    for dotted, value in changes.items():
        cur = raw
        parts = dotted.split("__")
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        if value is ...:
            del cur[parts[-1]]
        else:
            cur[parts[-1]] = value
    return raw


def _errors(raw, tmp_path=None, **kw) -> dict:
    with pytest.raises(ManifestError) as err:
        manifest_validate(raw, **kw)
    return err.value.errors


def test_it_loads_the_flagship_and_the_cuda_packages():
    flagship = manifest_load(REAL_PACKAGES / "sparse_mla_decode")
    assert flagship.language == "triton" and flagship.engine_env == "CEILING_SPARSE_MLA_CONFIG"
    assert [s.name for s in flagship.shapes] == ["v4-flash", "v32"]
    # V is the first 512 columns of the same cache row: KV bytes are topk * d_qk * 2 per request.
    nbytes, flops = flagship.cost("v4-flash", 1)
    assert nbytes == 640 * 512 * 2 + 64 * 512 * 2 + 64 * 512 * 2 + 640 * 4
    assert flops == 2 * 64 * 640 * (512 + 512)
    cuda = manifest_load(REAL_PACKAGES / "sparse_mla_decode_cuda")
    assert cuda.language == "cuda" and cuda.cuda["defines"] == ["impl", "BLOCK_N", "num_warps", "VEC", "STAGES"]
    assert cuda.cuda["kernel"] == "sparse_mla_decode" and cuda.cuda["harness"] == "harness.py"
    # every define is a grid parameter (NUM_SPLITS is a launch argument, not a define)
    assert set(cuda.cuda["defines"]) < set(cuda.params) and "NUM_SPLITS" in cuda.params
    assert cuda.grid["impl"] == ["baseline", "head_tiled", "split_k"]


def test_it_expands_the_grid_and_counts_what_each_constraint_pruned(tmp_path):
    m = manifest_load(write_package(tmp_path))
    exp = grid_expand(m)
    # 2 impl x 3 BLOCK x 2 num_warps = 12; baseline keeps BLOCK 16 only (4 pruned by #0);
    # of the rest, BLOCK * num_warps <= 256 drops (64, 8) for tiled (1 pruned by #1).
    assert exp.combinations == 12
    assert [p["pruned"] for p in exp.pruned] == [4, 1]
    assert len(exp.variants) == 7 and exp.pruned_total == 5
    assert variant_key(exp.variants[0]) == "impl=baseline,BLOCK=16,num_warps=4"
    sub = grid_expand(m, {"impl": ["tiled"], "num_warps": [8]})
    assert sub.combinations == 3 and [v["BLOCK"] for v in sub.variants] == [16, 32]
    assert sub.subset == {"impl": ["tiled"], "num_warps": [8]}


def test_it_refuses_a_subset_value_the_grid_does_not_have(tmp_path):
    m = manifest_load(write_package(tmp_path))
    with pytest.raises(ManifestError) as err:
        grid_expand(m, {"BLOCK": [16, 48], "warps": [4]})
    assert err.value.errors["params.BLOCK"] == ["48 is not one of the grid's values [16, 32, 64]"]
    assert "not a grid parameter of toy_attn" in err.value.errors["params.warps"][0]


def test_the_flagship_grid_counts_add_up():
    m = manifest_load(REAL_PACKAGES / "sparse_mla_decode")
    exp = grid_expand(m)
    product = 1
    for values in m.grid.values():
        product *= len(values)
    assert exp.combinations == product
    assert len(exp.variants) + sum(p["pruned"] for p in exp.pruned) == product
    assert {v["impl"] for v in exp.variants} == {"baseline", "head_tiled", "split_k"}
    assert all(v["NUM_SPLITS"] == "auto" for v in exp.variants if v["impl"] != "split_k")


@pytest.mark.parametrize("changes, path, message", [
    ({"title": ...}, "title", "is required"),
    ({"language": "rust"}, "language", "Input should be 'triton' or 'cuda'"),
    ({"heads": 3}, "heads", "unknown field 'heads'"),
    ({"shapes__0__heads": "8"}, "shapes.0.heads", "shape fields must be numbers, got '8'"),
    ({"shapes__1__batches": [1, 0]}, "shapes.1.batches", "batch sizes must be >= 1"),
    ({"shapes__1__name": "small"}, "shapes.1.name", "shape 'small' is declared twice"),
    ({"grid__BLOCK": [16, True]}, "grid.BLOCK.1", "must be an integer or a string, got true"),
    ({"grid__BLOCK": []}, "grid.BLOCK", "must be a non-empty list"),
    ({"grid__BLOCK": [16, 16]}, "grid.BLOCK", "lists a value twice"),
    ({"grid__constraints": ["BLOCK.bit_length() > 3"]}, "grid.constraints.0", "attribute access"),
    ({"grid__constraints": ["BLOCKS == 16"]}, "grid.constraints.0", "unknown name BLOCKS"),
    ({"cost__bytes": "batch * seq_len"}, "cost.bytes", "unknown name seq_len"),
    ({"cost__flops": "batch - 1"}, "cost.flops", "shape small batch 1: must give a positive number, got 0"),
    ({"tolerance__atol": -1.0}, "tolerance.atol", "greater than or equal to 0"),
    ({"engine__env": "LD_PRELOAD"}, "engine.env", "is not an allowed config variable"),
    ({"engine__env": "CEILING_PROC_ID"}, "engine.env", "is not an allowed config variable"),
    ({"engine__env": "", "engine__flag": ""}, "engine", "needs env"),
    ({"engine__flag": "-x"}, "engine.flag", "must look like --some-option"),
    ({"reference": "reference.py"}, "reference", "must be 'module_file.py:function'"),
    ({"sources": ["kernel.py", "../../etc/passwd"]}, "sources.1", "must be a relative path inside the package"),
    ({"entry": "kernel.cu"}, "entry", "a triton package's entry must be a .py file"),
    ({"cuda": {"kernel": "k"}}, "cuda", "only applies to language 'cuda'"),
    # a refused value is quoted as every message quotes input: hidden characters as code points
    ({"dtype": "bf\u202e16"}, "dtype", "'bf<U+202E>16' must be a short lowercase name"),
    ({"engine__flag": "--it's"}, "engine.flag", "\"--it's\" must look like --some-option"),
    # the baseline's words: one line, short, no parentheses (the pages put them in some), and of a
    # grid that has baseline variants
    ({"baseline": " "}, "baseline", "is empty: say what the impl = 'baseline' variants are, or leave it out"),
    ({"baseline": "one block\nper head"}, "baseline", "must be one line"),
    ({"baseline": "x" * 201}, "baseline", "has 201 characters; at most 200"),
    ({"baseline": "one program per (request, head)"}, "baseline", "may not hold parentheses"),
    ({"baseline": 5}, "baseline", "Input should be a valid string"),
    ({"baseline": "one block per head", "grid__impl": ["tiled"], "grid__constraints": []}, "baseline",
     "describes the impl = 'baseline' variants, but the grid's impl has no 'baseline'"),
])
def test_it_reports_each_problem_at_its_field_path(changes, path, message):
    errors = _errors(_raw(**changes))
    assert path in errors, errors
    assert any(message in m for m in errors[path]), errors[path]


def test_a_baseline_is_kept_in_one_line_and_stored_with_the_manifest():
    manifest = manifest_validate(_raw(baseline="one block  per request\tand head"))
    assert manifest.baseline == "one block per request and head"
    assert manifest.as_dict()["baseline"] == "one block per request and head"
    assert manifest_validate(manifest.as_dict()).baseline == manifest.baseline   # a stored copy reads back
    assert "baseline" not in manifest_validate(_raw()).as_dict()


def test_it_reports_every_problem_at_once():
    errors = _errors(_raw(title=..., language="rust", grid__BLOCK=[]))
    assert {"title", "language"} <= set(errors)


def test_it_checks_files_and_the_directory_name(tmp_path):
    d = write_package(tmp_path, name="other_dir")
    (d / "reference.py").unlink()
    with pytest.raises(ManifestError) as err:
        manifest_load(d)
    errors = err.value.errors
    assert errors["name"] == ["'toy_attn' must equal the package directory name 'other_dir'"]
    assert any("does not exist" in m for m in errors["reference"])
    assert any("does not exist" in m for m in errors["sources.1"])


def test_it_requires_the_cuda_table_and_allowlisted_nvcc_options(tmp_path):
    text = TEST_MANIFEST.replace('language = "triton"', 'language = "cuda"').replace(
        '"kernel.py", "reference.py"', '"kernel.cu", "reference.py"').replace('entry = "kernel.py"', 'entry = "kernel.cu"')
    d = write_package(tmp_path, manifest=text)
    (d / "kernel.cu").write_text("// nothing\n")
    with pytest.raises(ManifestError) as err:
        manifest_load(d)
    assert err.value.errors == {"cuda": ["is required for language 'cuda' (kernel, nvcc_flags, defines)"]}
    (d / "manifest.toml").write_text(text + '\n[cuda]\nkernel = "toy"\nnvcc_flags = ["-O3", "-ccbin=/tmp/evil", "-Xcompiler=-fplugin=x.so"]\n'
                                            'defines = ["BLOCK", "THREADS"]\n')
    with pytest.raises(ManifestError) as err:
        manifest_load(d)
    errors = err.value.errors
    assert "cuda.nvcc_flags.1" in errors and "cuda.nvcc_flags.2" in errors and "cuda.nvcc_flags.0" not in errors
    assert errors["cuda.defines.1"] == ["'THREADS' is not a grid parameter (impl, BLOCK, num_warps)"]


def test_it_reports_toml_syntax_errors_with_their_position(tmp_path):
    d = write_package(tmp_path, manifest='name = "toy_attn"\ntitle = \n')
    with pytest.raises(ManifestError) as err:
        manifest_load(d)
    assert "manifest.toml is not valid TOML" in err.value.errors["manifest"][0]
    assert "line 2" in err.value.errors["manifest"][0]
