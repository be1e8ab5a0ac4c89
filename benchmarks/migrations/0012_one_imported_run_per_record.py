"""One imported run per result record (``record_sha256``), copies imported with ``allow_duplicate``
aside: a partial unique index, so the database refuses the second of two concurrent imports of one
record. Its own migration, after 0011 filled the digests in and marked the later copies."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("benchmarks", "0011_imported_run_record_digest"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="benchmarkrun",
            constraint=models.UniqueConstraint(
                condition=models.Q(("allowed_duplicate", False), ("source", "imported"),
                                   models.Q(("record_sha256", ""), _negated=True)),
                fields=("record_sha256",), name="benchmarks_one_imported_run_per_record",
                violation_error_message="this result record was already imported"),
        ),
    ]
