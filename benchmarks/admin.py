"""Admin registrations of the benchmarks app: read-only views of sweeps and runs.

Neither can be added here: a sweep is created by ``POST /api/sweeps/``, the deployment page or
``manage.py sweep`` (which validate its grid and queue it for a worker), a run by the sweep that
measures it or by an import of a results file. A row added by hand would have no deployment, an
empty grid and a status (pending, running) that nothing would ever move on, and would be listed
everywhere as unfinished."""
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from benchmarks.models import RUN_ADMIN_DEFERRED, BenchmarkRun, BenchmarkSweep


class _SystemWritten(admin.ModelAdmin):
    """Rows only the services write: viewable, never added by hand (every field is read-only, so
    an "Add" form could only save an empty row)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


# A sweep's fields shown as every read shows them (a stored secret's value masked), each by the
# admin's method in place of the field itself, which is left out of the form so it is neither
# shown nor editable.
_SWEEP_SHOWN = {"name": "name_shown", "served_model_name": "served_model_shown", "snapshot": "snapshot_shown"}


@admin.register(BenchmarkSweep)
class BenchmarkSweepAdmin(_SystemWritten):
    """Sweeps with status and progress; rows are written by services, so fields are read-only.
    A sweep keeps its deployment (``PROTECT``): deleting the deployment in admin lists its sweeps
    as protected and is refused until they are deleted here."""

    list_display = ("id", "name_shown", "deployment", "status", "points_done", "points_total", "served_model_shown",
                    "topology", "created_at")
    list_select_related = ("deployment__recipe",)
    list_filter = ("status", "topology", "engine")
    search_fields = ("name", "served_model_name")
    exclude = tuple(_SWEEP_SHOWN)
    readonly_fields = [_SWEEP_SHOWN.get(f.name, f.name) for f in BenchmarkSweep._meta.fields]

    @admin.display(description="snapshot")
    def snapshot_shown(self, obj: BenchmarkSweep) -> str:
        """The snapshot as every read shows it (:func:`benchmarks.models.snapshot_shown`): a stored
        secret's value masked in all of it (the recipe's name, the spec, each process's argv and
        env), indented."""
        from benchmarks.models import snapshot_shown
        from deployments.admin import json_shown

        return json_shown(snapshot_shown(obj.snapshot))

    @admin.display(description="name", ordering="name")
    def name_shown(self, obj: BenchmarkSweep) -> str:
        """The name, a stored secret's value in it (saved before it was refused there) masked."""
        from deployments.services import free_text_shown

        return free_text_shown(obj.name)

    @admin.display(description="served model name", ordering="served_model_name")
    def served_model_shown(self, obj: BenchmarkSweep) -> str:
        """The served model name, made of the recipe's name where the spec gives none: a stored
        secret's value in it masked."""
        from benchmarks.models import served_model_name_shown

        return served_model_name_shown(obj.served_model_name)


# A run's fields shown as every read shows them, as :data:`_SWEEP_SHOWN` for a sweep.
_RUN_SHOWN = {"served_model_name": "served_model_shown", "snapshot": "snapshot_shown"}


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(_SystemWritten):
    """Runs (measured and imported); read-only: numbers come from the load generator or a file."""

    list_display = ("id", "sweep", "source", "status", "concurrency", "input_len", "output_len", "output_tok_s",
                    "ttft_p99_ms")
    list_filter = ("source", "status")
    # ``exclude`` alone does not hide a read-only field: the change page showed the imported text,
    # up to the 16 MB import cap (it downloads from the run page instead). The snapshot and the
    # served model name are shown as every read shows them (:data:`_RUN_SHOWN`), by the admin's
    # methods in place of the fields.
    readonly_fields = [_RUN_SHOWN.get(f.name, f.name) for f in BenchmarkRun._meta.fields if f.name != "original_text"]
    exclude = ("original_text", *_RUN_SHOWN)

    @admin.display(description="snapshot")
    def snapshot_shown(self, obj: BenchmarkRun) -> str:
        """The snapshot as every read shows it (:func:`benchmarks.models.snapshot_shown`): a stored
        secret's value masked in all of it (the recipe's name, the spec, each process's argv and
        env), indented."""
        from benchmarks.models import snapshot_shown
        from deployments.admin import json_shown

        return json_shown(snapshot_shown(obj.snapshot))

    @admin.display(description="served model name")
    def served_model_shown(self, obj: BenchmarkRun) -> str:
        """The served model name (the recipe's name where the spec gives none; an imported file's
        ``model_id``): a stored secret's value in it masked."""
        from benchmarks.models import served_model_name_shown

        return served_model_name_shown(obj.served_model_name)

    def get_queryset(self, request: HttpRequest) -> QuerySet[BenchmarkRun]:
        """Runs without their large fields (:data:`benchmarks.models.RUN_ADMIN_DEFERRED`): the
        changelist, "Delete selected" (its confirmation page and the delete) and the delete page
        read every chosen row, and 6,000 imported runs that each kept a 2 MB file grew the process
        past 20 GB. A change page reads the fields it shows, one query each."""
        return super().get_queryset(request).defer(*RUN_ADMIN_DEFERRED)
