"""The tuning probe's ``--define`` switch (``kernels/packages/sparse_mla_decode/probe.py``): a name
nvcc would take as one ``-D`` define, or exit status 2 with the reason before any GPU work."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[1] / "packages" / "sparse_mla_decode" / "probe.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("sparse_mla_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["BAD-NAME", "X=1 -DY", "1ABC", "A=", "A;B", ""])
def test_a_define_that_is_not_one_plain_name_is_refused_with_the_reason(probe, tmp_path, capsys, name):
    status = probe.main(["--variants", str(tmp_path / "v.json"), "--points", "v32:1", "--out", str(tmp_path / "o.json"),
                         "--define", name])
    assert status == 2
    err = capsys.readouterr().err
    assert f"--define {name!r} must be NAME or NAME=VALUE" in err
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("name", ["SIBLING_COMBINE", "FUSED_COMBINE", "X=1", "_A9=v2.5"])
def test_a_plain_define_passes_the_check(probe, name):
    assert probe.DEFINE_RE.fullmatch(name)
