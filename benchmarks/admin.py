"""Admin registrations of the benchmarks app: read-mostly views of sweeps and runs."""
from django.contrib import admin

from benchmarks.models import BenchmarkRun, BenchmarkSweep


@admin.register(BenchmarkSweep)
class BenchmarkSweepAdmin(admin.ModelAdmin):
    """Sweeps with status and progress; rows are written by services, so fields are read-only."""

    list_display = ("id", "name", "status", "points_done", "points_total", "served_model_name", "topology",
                    "created_at")
    list_filter = ("status", "topology", "engine")
    search_fields = ("name", "served_model_name")
    readonly_fields = [f.name for f in BenchmarkSweep._meta.fields]


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(admin.ModelAdmin):
    """Runs (measured and imported); read-only: numbers come from the load generator or a file."""

    list_display = ("id", "sweep", "source", "status", "concurrency", "input_len", "output_len", "output_tok_s",
                    "ttft_p99_ms")
    list_filter = ("source", "status")
    readonly_fields = [f.name for f in BenchmarkRun._meta.fields]
    exclude = ("original_text",)
