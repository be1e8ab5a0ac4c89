"""Each imported run records the SHA-256 of its own record, and none keeps the import time as its end.

``record_sha256`` is the SHA-256 of the run's record read as JSON and written canonically
(:func:`benchmarks.importers.record_digest`, copied below as it is when this migration was
written): how an import recognises a result imported before, whatever file holds it. It is
filled in from each imported run's ``original_text`` (its own line, or the whole file when the
file held one run: a file that is an array of one object is that object). A run whose text cannot
be read as such JSON keeps "" and is never matched. Where several runs hold one record (a file
imported again with ``allow_duplicate``, or a grown file whose earlier lines were stored again),
the oldest keeps it as the one run of that record and the later ones are marked
``allowed_duplicate``, so the unique index of migration 0012 can be built; none is deleted.

``ended_at`` of imported runs held the moment of the import, which is not when the benchmark
ended; it is cleared (``created_at`` still says when the run was imported).
"""
import hashlib
import json

from django.db import migrations, models

BOM = "\ufeff"


def _record_digest(record: str) -> str:
    try:
        value = json.loads(record.removeprefix(BOM))
    except (ValueError, RecursionError):
        return ""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        return ""
    try:
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    except (ValueError, RecursionError):
        return ""
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def backfill(apps, schema_editor) -> None:
    Run = apps.get_model("benchmarks", "BenchmarkRun")
    imported = Run.objects.filter(source="imported")
    imported.exclude(ended_at=None).update(ended_at=None)
    seen: set[str] = set()
    pks = list(imported.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(pks), 200):
        chunk = pks[start:start + 200]
        for pk, text in Run.objects.filter(pk__in=chunk).order_by("pk").values_list("pk", "original_text"):
            digest = _record_digest(text or "")
            repeat = bool(digest) and digest in seen
            if digest:
                seen.add(digest)
            Run.objects.filter(pk=pk).update(record_sha256=digest, allowed_duplicate=repeat)


class Migration(migrations.Migration):

    dependencies = [
        ("benchmarks", "0010_sweep_cancel_requested_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="benchmarkrun",
            name="allowed_duplicate",
            field=models.BooleanField(
                default=False, help_text="imported with allow_duplicate while an earlier run held the same record"),
        ),
        migrations.AddField(
            model_name="benchmarkrun",
            name="record_sha256",
            field=models.CharField(
                blank=True, db_index=True, max_length=64,
                help_text="SHA-256 (hex) of an imported run's own record as canonical JSON; how a result imported "
                          "again is recognised"),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
