"""A measured point whose every request a stop aborted in flight, after they had streamed output
tokens, has an output throughput: those tokens over its measured duration
(:func:`benchmarks.sweeps.aborted_only_throughput`). Points stored before that rule kept null in
the sortable ``output_tok_s`` (and ``request_rate_achieved``); this fills them in from their
stored summaries, which stay as they were (the figure is read from them the same way), so the
API's ``output_tok_s`` and ordering by it agree with the pages and the exports.
"""
import math

from django.db import migrations

WITH_ABORTED = "completed_and_aborted"


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _streamed_throughput(summary) -> float | None:
    """tok/s the aborted requests streamed, for a summary of no success and no failure at the
    server whose aborted requests streamed tokens over a measured duration; else None. A summary
    that counted its aborted requests among ``failures`` too (``requests`` = ``successes`` +
    ``failures``) is read as :func:`benchmarks.sweeps.failure_counts` reads it."""
    if not isinstance(summary, dict) or summary.get("output_throughput_basis") != WITH_ABORTED:
        return None
    requests, successes, failures, aborted, tokens, duration = (
        summary.get(k) for k in ("requests", "successes", "failures", "aborted", "output_tokens_aborted",
                                 "duration_s"))
    if not all(_count(v) for v in (successes, failures, aborted, tokens)):
        return None
    if _count(requests) and aborted and requests - successes == failures:
        failures = max(0, failures - aborted)
    if successes != 0 or failures != 0 or aborted <= 0 or tokens <= 0:
        return None
    if not isinstance(duration, (int, float)) or isinstance(duration, bool) or not math.isfinite(duration) \
            or duration <= 0:
        return None
    return tokens / duration


def fill_in(apps, schema_editor) -> None:
    Run = apps.get_model("benchmarks", "BenchmarkRun")
    rows = Run.objects.filter(source="measured", output_tok_s__isnull=True).values_list("pk", "summary")
    for pk, summary in rows.iterator():
        tok_s = _streamed_throughput(summary)
        if tok_s is not None:
            Run.objects.filter(pk=pk).update(output_tok_s=tok_s, request_rate_achieved=0.0)


class Migration(migrations.Migration):

    dependencies = [("benchmarks", "0012_one_imported_run_per_record")]

    operations = [migrations.RunPython(fill_in, migrations.RunPython.noop)]
