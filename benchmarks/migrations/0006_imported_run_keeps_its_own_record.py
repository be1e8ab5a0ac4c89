"""Each run imported from a file of several runs keeps its own line, not the whole file.

Before this, every run of a file kept the whole file in ``original_text``: a JSON-lines file of
3,000 runs (2 MB) stored 6 GB. A run whose file holds more than one non-empty line and whose line
is known (``source_line``) keeps that line, verbatim without its line break, as an import does now
(:func:`benchmarks.services.runs.run_original_text`); a file of one run (one line, or one
pretty-printed object) stays whole. Runs of one file share its SHA-256, so each file is read once.
The space freed goes back to the operating system only after the database reclaims it
(PostgreSQL: ``VACUUM FULL benchmarks_benchmarkrun``).
"""
from django.db import migrations


def _own_line(text: str, source_line: int | None) -> str | None:
    """The line ``source_line`` (1-based) of ``text`` when ``text`` holds several non-empty
    lines, else None (keep the text)."""
    if not source_line or not text:
        return None
    lines = text.splitlines()
    if sum(1 for line in lines if line.strip()) < 2 or source_line > len(lines):
        return None
    return lines[source_line - 1]


def keep_own_records(apps, schema_editor) -> None:
    Run = apps.get_model("benchmarks", "BenchmarkRun")
    imported = Run.objects.filter(source="imported", source_line__isnull=False)
    by_digest: dict[str, list[tuple[int, int]]] = {}
    for pk, line, digest in imported.values_list("pk", "source_line", "original_sha256").order_by("pk"):
        by_digest.setdefault(digest or f"row-{pk}", []).append((pk, line))
    for rows in by_digest.values():
        # Runs with one digest hold one text (the digest is its hash); a row without a digest is
        # a group of its own.
        text = Run.objects.filter(pk=rows[0][0]).values_list("original_text", flat=True).first() or ""
        for pk, line in rows:
            own = _own_line(text, line)
            if own is not None:
                Run.objects.filter(pk=pk).update(original_text=own)


class Migration(migrations.Migration):

    dependencies = [("benchmarks", "0005_one_active_sweep_per_deployment")]

    operations = [migrations.RunPython(keep_own_records, migrations.RunPython.noop)]
