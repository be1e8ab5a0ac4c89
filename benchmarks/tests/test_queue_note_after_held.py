"""A sweep held back behind a sweep of a deployment sharing its CPUs is not said to have waited
for a benchmark worker all that time once it is let go: the warning that the control worker may
not be running counts from the last look that found it held, not from its creation."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from benchmarks.choices import SweepStatus
from benchmarks.models import BenchmarkSweep
from benchmarks.selectors import QUEUE_STALL_S, sweep_queue_note
from benchmarks.tests.sweep_support import sim_deployment_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(settings) -> tuple[BenchmarkSweep, BenchmarkSweep]:
    """Sweep ahead running on one deployment; a sweep of another deployment on the same CPU 0,
    created 136 s ago and held behind it since, its last look 2 s ago."""
    settings.CEILING_CONTROL_CONCURRENCY = 2
    ahead = BenchmarkSweep.objects.create(deployment=sim_deployment_create(base_url="http://127.0.0.1:9",
                                                                           recipe_name="sim-a"),
                                          status=SweepStatus.RUNNING)
    behind = BenchmarkSweep.objects.create(deployment=sim_deployment_create(base_url="http://127.0.0.1:9",
                                                                            recipe_name="sim-b"))
    now = timezone.now()
    BenchmarkSweep.objects.filter(pk=behind.pk).update(created_at=now - timedelta(seconds=136),
                                                       held_at=now - timedelta(seconds=2))
    return ahead, BenchmarkSweep.objects.select_related("deployment").get(pk=behind.pk)


def test_while_held_it_names_the_sweep_it_waits_for(held):
    ahead, behind = held
    assert sweep_queue_note(sweep=behind).startswith(
        f"waiting for sweep #{ahead.pk} on deployment #{ahead.deployment_id}, which shares CPU 0 on node local")


def test_just_let_go_it_is_queued_without_a_warning(held):
    ahead, behind = held
    BenchmarkSweep.objects.filter(pk=ahead.pk).update(status=SweepStatus.DONE)
    assert sweep_queue_note(sweep=behind) == "queued for a benchmark worker"
    # Up to the stall limit after its last held look, still no warning.
    later = behind.held_at + timedelta(seconds=QUEUE_STALL_S - 1)
    assert sweep_queue_note(sweep=behind, now=later) == "queued for a benchmark worker"


def test_nobody_took_it_long_after_it_was_let_go_warns_counting_from_the_last_held_look(held):
    ahead, behind = held
    BenchmarkSweep.objects.filter(pk=ahead.pk).update(status=SweepStatus.DONE)
    note = sweep_queue_note(sweep=behind, now=behind.held_at + timedelta(seconds=20))
    assert note == ("queued for a benchmark worker for 20 s since it was last held back while a worker slot is "
                    "free: the control worker may not be running (see `make status`)")


def test_a_sweep_never_held_counts_from_its_creation(held):
    ahead, behind = held
    BenchmarkSweep.objects.filter(pk=ahead.pk).update(status=SweepStatus.DONE)
    BenchmarkSweep.objects.filter(pk=behind.pk).update(held_at=None)
    behind.refresh_from_db()
    note = sweep_queue_note(sweep=behind, now=behind.created_at + timedelta(seconds=136))
    assert note == ("queued for a benchmark worker for 136 s while a worker slot is free: the control worker "
                    "may not be running (see `make status`)")
