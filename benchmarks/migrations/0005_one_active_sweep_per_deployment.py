"""At most one pending, waiting or running sweep per deployment, enforced by the database.

Concurrent sweeps of one deployment were possible before this index existed (two creates could
both pass the check before either row was written). Before the index is built, every active sweep
of a deployment but its oldest is failed with the reason and its cancel flag set (a worker still
running it stops within about a second); its running point is failed with the same reason.
"""
from django.db import migrations, models
from django.utils import timezone

ACTIVE = ["pending", "running", "waiting"]


def fail_concurrent_sweeps(apps, schema_editor) -> None:
    Sweep = apps.get_model("benchmarks", "BenchmarkSweep")
    Run = apps.get_model("benchmarks", "BenchmarkRun")
    kept: dict[int, int] = {}
    for pk, deployment_id in (Sweep.objects.filter(status__in=ACTIVE, deployment__isnull=False)
                              .order_by("created_at", "id").values_list("pk", "deployment_id")):
        if deployment_id not in kept:
            kept[deployment_id] = pk
            continue
        reason = (f"sweep #{kept[deployment_id]} was already active on deployment #{deployment_id}: concurrent "
                  "sweeps skew each other's numbers, so this one was stopped when one active sweep per "
                  "deployment became the rule")
        now = timezone.now()
        Sweep.objects.filter(pk=pk).update(status="failed", reason=reason, cancel_requested=True, ended_at=now,
                                           current_point="", current_tok_s=None)
        Run.objects.filter(sweep_id=pk, status="running").update(status="failed", reason=reason, ended_at=now)


class Migration(migrations.Migration):

    dependencies = [
        ("benchmarks", "0004_sweep_worker_heartbeat"),
    ]

    operations = [
        migrations.RunPython(fail_concurrent_sweeps, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="benchmarksweep",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status__in", ACTIVE)), fields=("deployment",),
                name="benchmarks_one_active_sweep_per_deployment",
                violation_error_message="the deployment already has a pending, waiting or running sweep",
            ),
        ),
    ]
