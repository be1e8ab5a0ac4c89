"""Admin registrations of the kernels app: read-only views of packages, jobs, variants, builds,
benchmarks and best variants (rows are written by :mod:`kernels.services`, never by hand).

Nothing is deleted here either: deleting a row by hand skips the services' rules. A package a
recipe's ``spec.kernels`` names would leave that recipe failing at launch ("not a registered
kernel package"), and a best variant (or the job, variant or benchmark it cascades from) would
leave its key in the exported config file that recipes hand to engines, since only
:mod:`kernels.services` rewrites those files."""
from django.contrib import admin
from simple_history.admin import SimpleHistoryAdmin

from kernels.models import KernelBenchmark, KernelBest, KernelBuild, KernelJob, KernelPackage, KernelVariant


class _NoDelete:
    """No delete permission (nor the "delete selected" action) for anyone, superusers included."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class _ReadOnly(_NoDelete, admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(KernelPackage)
class KernelPackageAdmin(_NoDelete, SimpleHistoryAdmin):
    """Packages with their manifest history (registered by ``manage.py kernel_register``)."""

    list_display = ("name", "title", "language", "source_hash", "updated_at")
    search_fields = ("name", "title")
    readonly_fields = [f.name for f in KernelPackage._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        # every field is the directory's: a page of Save buttons that can change nothing misleads
        # (the view permission still shows the package and its history)
        return False


@admin.register(KernelJob)
class KernelJobAdmin(_ReadOnly):
    list_display = ("id", "package", "node", "target_cc", "status", "variants_total", "builds_ok", "builds_failed",
                    "builds_discarded", "benchmarks_correct", "device_name", "created_at")
    list_filter = ("status", "target_cc", "package")
    readonly_fields = [f.name for f in KernelJob._meta.fields]


@admin.register(KernelVariant)
class KernelVariantAdmin(_ReadOnly):
    list_display = ("id", "job", "ordinal", "key")
    search_fields = ("key",)
    list_filter = ("job__package",)


@admin.register(KernelBuild)
class KernelBuildAdmin(_ReadOnly):
    list_display = ("variant", "ok", "registers", "spills_bytes", "shared_bytes", "tensor_core_evidence", "build_s",
                    "discarded", "discard_reason")
    list_filter = ("ok", "discarded", "tensor_core_evidence")


@admin.register(KernelBenchmark)
class KernelBenchmarkAdmin(_ReadOnly):
    list_display = ("variant", "shape", "batch", "correct", "median_us", "gbps", "tflops", "roofline_fraction",
                    "bound")
    list_filter = ("shape", "batch", "correct", "bound")


@admin.register(KernelBest)
class KernelBestAdmin(_ReadOnly):
    list_display = ("package", "device_name", "cc", "shape", "batch", "compiler", "median_us", "speedup",
                    "roofline_fraction", "config_path")
    list_filter = ("package", "device_name", "shape")
