"""Imported runs remember the SHA-256 of their file (duplicate imports are refused); points may
have a time limit; running points carry the load generator's live progress."""
import hashlib

from django.db import migrations, models


def _hash_imported(apps, schema_editor):
    # Runs imported before this migration kept their file's text: hash it the way run_import does
    # (UTF-8 bytes), so a second import of an old file is recognised too.
    run_model = apps.get_model("benchmarks", "BenchmarkRun")
    for run in run_model.objects.filter(source="imported", original_sha256="").exclude(original_text="").iterator():
        run.original_sha256 = hashlib.sha256(run.original_text.encode("utf-8")).hexdigest()
        run.save(update_fields=["original_sha256"])


class Migration(migrations.Migration):

    dependencies = [
        ('benchmarks', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='benchmarkrun',
            name='duration_s',
            field=models.FloatField(blank=True, help_text='time limit of the point in seconds', null=True),
        ),
        migrations.AddField(
            model_name='benchmarkrun',
            name='original_sha256',
            field=models.CharField(blank=True, db_index=True, help_text="SHA-256 (hex) of the imported file's UTF-8 bytes", max_length=64),
        ),
        migrations.AddField(
            model_name='benchmarkrun',
            name='progress',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(_hash_imported, migrations.RunPython.noop),
    ]
