"""Pages of the kernels app under ``/kernels/``: packages, jobs (live progress, the variant table,
charts, best variants, exports), the best-config download and the what-if projection of a sweep.

Names live in the ``kernels`` namespace (``kernels:job-detail``) so they never collide with the
API router's bare names.
"""
from django.urls import path

from kernels import views

app_name = "kernels"

urlpatterns = [
    path("kernels/", views.kernel_index, name="index"),
    path("kernels/whatif/", views.whatif_view, name="whatif"),
    path("kernels/packages/", views.package_list, name="package-list"),
    path("kernels/packages/<str:name>/", views.package_detail, name="package-detail"),
    path("kernels/packages/<str:name>/jobs/new/", views.job_create_view, name="job-create"),
    path("kernels/jobs/", views.job_list, name="job-list"),
    path("kernels/jobs/<int:pk>/", views.job_detail, name="job-detail"),
    path("kernels/jobs/<int:pk>/progress/", views.job_progress_partial, name="job-progress"),
    path("kernels/jobs/<int:pk>/variants/", views.job_variants_partial, name="job-variants"),
    path("kernels/jobs/<int:pk>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("kernels/jobs/<int:pk>/export.<str:fmt>", views.job_export, name="job-export"),
    path("kernels/best/<int:pk>/config.json", views.best_config, name="best-config"),
]
