"""At most one kernel job per node building or benchmarking at a time, enforced by the database.

Two jobs of one node could run together before this index existed (each task claimed its own row),
so their builds shared the cores and their benchmarks the GPU, skewing each other's timings. Before
the index is built, on every node with more than one running job, the job whose row changed last
(the likeliest to be alive; a leftover of a stopped agent changes no more) is kept and every other
is failed with the reason and its cancel flag set (a task still running it ends its runner within
half a second and leaves the row failed). Jobs without a node never collide (NULLs are distinct).
"""
from django.conf import settings
from django.db import migrations, models
from django.utils import timezone

RUNNING = ["building", "benchmarking"]


def fail_concurrent_jobs(apps, schema_editor) -> None:
    KernelJob = apps.get_model("kernels", "KernelJob")
    kept: dict[int, int] = {}
    rows = (KernelJob.objects.filter(status__in=RUNNING, node__isnull=False)
            .order_by("-updated_at", "-id").values_list("pk", "node_id", "node__name"))
    for pk, node_id, node_name in rows:
        if node_id not in kept:
            kept[node_id] = pk
            continue
        reason = (f"kernel job #{kept[node_id]} was running on node {node_name} at the same time: concurrent "
                  "kernel jobs share the cores and the GPU and skew each other's timings, so this one was "
                  "stopped when one kernel job per node became the rule")
        KernelJob.objects.filter(pk=pk).update(status="failed", reason=reason, cancel_requested=True,
                                               ended_at=timezone.now())


class Migration(migrations.Migration):

    dependencies = [
        ('deployments', '0007_node_agent_stopped_at'),
        ('kernels', '0004_job_source_results'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(fail_concurrent_jobs, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='kerneljob',
            constraint=models.UniqueConstraint(
                condition=models.Q(('status__in', RUNNING)), fields=('node',),
                name='kernels_one_running_job_per_node',
                violation_error_message='the node already runs a kernel job (building or benchmarking)',
            ),
        ),
    ]
