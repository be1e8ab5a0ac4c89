"""Counts of one read in the singular: ``1 CPU``, ``1 variant of 1 combination``, ``1 build``."""
from __future__ import annotations

from pathlib import Path

from django.template.loader import render_to_string


def test_one_cpu_reads_in_the_singular():
    cards = render_to_string("deployments/_process_cards.html", {"processes": [
        {"role": "single", "ordinal": 0, "cpus": "3", "cpu_count": 1}]})
    assert "(1 CPU)" in cards and "CPUs)" not in cards
    templates = Path(__file__).resolve().parents[1] / "templates" / "deployments"
    assert "({{ p.pinning.cpu_count }} CPU{{ p.pinning.cpu_count|pluralize }}" in (
        templates / "_deployment_live.html").read_text()
    assert '{% include "deployments/_cpu_count.html" with node=t.node %}' in (templates / "_wall_tiles.html").read_text()
    assert render_to_string("deployments/_cpu_count.html", {"node": {"cpu_count": 1}}) == "1 CPU"
    assert render_to_string("deployments/_cpu_count.html", {"node": {"cpu_count": 8}}) == "8 CPUs"


def test_one_variant_one_combination_and_one_build_read_in_the_singular():
    progress = render_to_string("kernels/_job_progress.html", {"job": {
        "builds_ok": 1, "builds_discarded": 0, "builds_failed": 0, "variants_total": 1}, "builds_kept": 1})
    assert "1 build: 1 kept" in progress and "1 variant in all" in progress
    detail = (Path(__file__).resolve().parents[2] / "kernels" / "templates" / "kernels" / "job_detail.html").read_text()
    assert ('{{ job.variants_total }} variant{{ job.variants_total|pluralize }} of {{ grid.combinations|default:"?" }} '
            'combination{% if grid.combinations != 1 %}s{% endif %}') in detail
