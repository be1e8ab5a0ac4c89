"""Server-rendered pages of the deployments app, one module per area:

* :mod:`~deployments.views.recipe_pages`: recipes (list, detail, create/edit with the htmx
  validate-and-preview partial, history with diff and revert, dry-run, deploy);
* :mod:`~deployments.views.deployment_pages`: deployments (list; one deployment's header,
  processes, timeline, log tail and live telemetry; stop/cancel; log download);
* :mod:`~deployments.views.node_pages`: nodes (list; one node with its live GPU tiles);
* :mod:`~deployments.views.wall`: the wall display (``/wall/``);
* :mod:`~deployments.views.common`: the role decorator and formatting every page shares.

The names below are what ``deployments/urls.py`` routes to (and :func:`role_page`, which the
benchmarks pages use too).
"""
from deployments.views.common import role_page
from deployments.views.deployment_pages import (
    deployment_detail,
    deployment_list,
    deployment_list_rows_partial,
    deployment_live_partial,
    deployment_logs_partial,
    deployment_stop,
    deployment_sweeps_partial,
    process_log_download,
    process_log_partial,
)
from deployments.views.node_pages import node_detail, node_list
from deployments.views.recipe_pages import (
    recipe_create,
    recipe_deploy,
    recipe_detail,
    recipe_diff_partial,
    recipe_dry_run,
    recipe_edit,
    recipe_history,
    recipe_list,
    recipe_revert,
    recipe_validate_partial,
)
from deployments.views.wall import wall, wall_tiles_partial

__all__ = [
    "role_page",
    "recipe_list", "recipe_create", "recipe_validate_partial", "recipe_detail", "recipe_edit", "recipe_history",
    "recipe_diff_partial", "recipe_revert", "recipe_dry_run", "recipe_deploy",
    "deployment_list", "deployment_list_rows_partial", "deployment_detail", "deployment_live_partial",
    "deployment_logs_partial", "deployment_sweeps_partial", "deployment_stop", "process_log_partial", "process_log_download",
    "node_list", "node_detail",
    "wall", "wall_tiles_partial",
]
