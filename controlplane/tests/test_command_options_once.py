"""Every management command refuses a single-valued option given twice, as the API and the page
forms refuse a field given twice (argparse alone keeps the last value)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks.models import BenchmarkSweep

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_call_command_refuses_a_repeated_option_and_creates_nothing():
    with pytest.raises(CommandError, match=r"--concurrency is given twice \('1', then '2'\): give it once"):
        call_command("sweep", "anything", "--concurrency", "1", "--concurrency", "2")
    assert not BenchmarkSweep.objects.exists()


def test_the_command_line_prints_the_refusal_and_exits_2():
    done = subprocess.run([sys.executable, "manage.py", "sweep", "x", "--concurrency", "1", "--concurrency", "2",
                           "--lengths", "64:64"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "--concurrency is given twice ('1', then '2'): give it once" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_flag_may_repeat_and_one_option_once_is_fine():
    from controlplane.commands import CeilingCommand

    class Probe(CeilingCommand):
        def add_arguments(self, parser):
            parser.add_argument("--n", default=None)
            parser.add_argument("--wait", action="store_true")

    parser = Probe().create_parser("manage.py", "probe")
    options = parser.parse_args(["--n", "3", "--wait", "--wait"])
    assert options.n == "3" and options.wait is True
    assert parser.parse_args(["--n", "4"]).n == "4"   # the same parser parses again
