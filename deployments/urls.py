"""Pages of the deployments app: recipes, deployments (with their htmx partials and log
downloads), nodes and the wall display.

Names live in the ``deployments`` namespace (``deployments:recipe-list``) because the API
router registers the bare ``recipe-list`` / ``node-detail`` names for its own routes.
"""
from django.urls import path

from deployments import views

app_name = "deployments"

urlpatterns = [
    path("recipes/", views.recipe_list, name="recipe-list"),
    path("recipes/new/", views.recipe_create, name="recipe-create"),
    path("recipes/validate/", views.recipe_validate_partial, name="recipe-validate"),
    path("recipes/<int:pk>/", views.recipe_detail, name="recipe-detail"),
    path("recipes/<int:pk>/edit/", views.recipe_edit, name="recipe-edit"),
    path("recipes/<int:pk>/history/", views.recipe_history, name="recipe-history"),
    path("recipes/<int:pk>/diff/", views.recipe_diff_partial, name="recipe-diff"),
    path("recipes/<int:pk>/revert/<int:version>/", views.recipe_revert, name="recipe-revert"),
    path("recipes/<int:pk>/dry-run/", views.recipe_dry_run, name="recipe-dry-run"),
    path("recipes/<int:pk>/deploy/", views.recipe_deploy, name="recipe-deploy"),
    path("deployments/", views.deployment_list, name="deployment-list"),
    path("deployments/rows/", views.deployment_list_rows_partial, name="deployment-list-rows"),
    path("deployments/<int:pk>/", views.deployment_detail, name="deployment-detail"),
    path("deployments/<int:pk>/live/", views.deployment_live_partial, name="deployment-live"),
    path("deployments/<int:pk>/logs/", views.deployment_logs_partial, name="deployment-logs"),
    path("deployments/<int:pk>/sweeps/", views.deployment_sweeps_partial, name="deployment-sweeps"),
    path("deployments/<int:pk>/stop/", views.deployment_stop, name="deployment-stop"),
    path(
        "deployments/<int:pk>/processes/<int:process_pk>/log/",
        views.process_log_partial,
        name="process-log",
    ),
    path(
        "deployments/<int:pk>/processes/<int:process_pk>/log/download/",
        views.process_log_download,
        name="process-log-download",
    ),
    path("nodes/", views.node_list, name="node-list"),
    path("nodes/<str:name>/", views.node_detail, name="node-detail"),
    path("wall/", views.wall, name="wall"),
    path("wall/tiles/", views.wall_tiles_partial, name="wall-tiles"),
]
