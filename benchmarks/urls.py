"""Pages of the benchmarks app under ``/benchmarks/``: the index with the import form, the sweep
form, sweep and run pages with their htmx partials and downloads, and the comparison view.

Names live in the ``benchmarks`` namespace (``benchmarks:sweep-detail``) so they never collide
with the API router's bare names.
"""
from django.urls import path

from benchmarks import views

app_name = "benchmarks"

urlpatterns = [
    path("benchmarks/", views.benchmark_index, name="index"),
    path("benchmarks/import/", views.run_import_view, name="run-import"),
    path("benchmarks/compare/", views.compare, name="compare"),
    path("benchmarks/sweeps/", views.sweep_list, name="sweep-list"),
    path("benchmarks/sweeps/new/", views.sweep_create_view, name="sweep-create"),
    path("benchmarks/sweeps/<int:pk>/", views.sweep_detail, name="sweep-detail"),
    path("benchmarks/sweeps/<int:pk>/progress/", views.sweep_progress_partial, name="sweep-progress"),
    path("benchmarks/sweeps/<int:pk>/results/", views.sweep_results_partial, name="sweep-results"),
    path("benchmarks/sweeps/<int:pk>/cancel/", views.sweep_cancel_view, name="sweep-cancel"),
    path("benchmarks/sweeps/<int:pk>/export.<str:fmt>", views.sweep_export, name="sweep-export"),
    path("benchmarks/runs/", views.run_list, name="run-list"),
    path("benchmarks/runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("benchmarks/runs/<int:pk>/export.<str:fmt>", views.run_export, name="run-export"),
    path("benchmarks/runs/<int:pk>/original/", views.run_original, name="run-original"),
]
