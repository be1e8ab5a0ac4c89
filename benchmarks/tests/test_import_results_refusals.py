"""``manage.py import_results`` exits with status 2 on every refusal of its input, as ``sweep``,
``dryrun`` and ``kernel_job`` do (:func:`controlplane.commands.refused`): a ``--user`` that may not
import, a missing or unreadable file and a file imported before on one line naming it; a file
whose contents are refused with one line per problem. Nothing is stored on a refusal."""
from __future__ import annotations

import hashlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from benchmarks.models import BenchmarkRun

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


def refusal(*args: str) -> CommandError:
    with pytest.raises(CommandError) as err:
        call_command("import_results", *args, stdout=io.StringIO())
    return err.value


def test_a_user_who_may_not_import_is_refused_with_status_2(viewer):
    for who, text in (("nobody", "--user 'nobody': no such user"),
                      ("vera-viewer", "--user 'vera-viewer': has the viewer role; creating runs by import needs "
                                      "operator or admin")):
        err = refusal(str(DATA / "vllm-bench-serve.json"), "--user", who)
        assert (str(err), err.returncode) == (text, 2)
    assert not BenchmarkRun.objects.exists()


def test_a_missing_or_unreadable_file_is_refused_on_one_line_with_status_2(tmp_path):
    missing = tmp_path / "absent.json"
    err = refusal(str(missing))
    assert str(err).startswith(f"cannot read {missing}: ") and "No such file" in str(err)
    assert err.returncode == 2 and "\n" not in str(err)
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(b'{"model_id": "caf\xe9"}')
    err = refusal(str(latin1))
    assert str(err).startswith(f"cannot read {latin1}: 'utf-8' codec can't decode byte 0xe9")
    assert err.returncode == 2 and "\n" not in str(err)
    err = refusal(str(tmp_path))   # a folder, not a file
    assert str(err).startswith(f"cannot read {tmp_path}: ") and err.returncode == 2
    assert not BenchmarkRun.objects.exists()


def test_a_file_whose_contents_are_refused_keeps_its_list_and_exits_2(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    err = refusal(str(empty))
    assert str(err).startswith("empty.json cannot be imported:\n  ") and err.returncode == 2
    assert not BenchmarkRun.objects.exists()


def test_a_file_imported_before_is_refused_on_one_line_with_status_2(tmp_path):
    path = tmp_path / "vllm.json"
    path.write_text((DATA / "vllm-bench-serve.json").read_text())
    call_command("import_results", str(path), stdout=io.StringIO())
    err = refusal(str(path))
    assert str(err).startswith("vllm.json: this file was already imported as run #")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert str(err).endswith(f"(same content, SHA-256 {digest}); pass --allow-duplicate to import it again")
    assert "allow_duplicate" not in str(err)
    assert err.returncode == 2 and "\n" not in str(err)
    assert BenchmarkRun.objects.count() == 1


def test_the_command_line_exits_2_on_a_bad_flag_and_a_missing_file(tmp_path):
    for args, said in (([str(tmp_path / "absent.json")], f"cannot read {tmp_path / 'absent.json'}: "),
                       ([str(tmp_path / "absent.json"), "--allow-duplicate=yes"],
                        "--allow-duplicate: ignored explicit argument 'yes'")):
        done = subprocess.run([sys.executable, "manage.py", "import_results", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert said in done.stderr and "Traceback" not in done.stderr
