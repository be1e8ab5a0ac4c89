"""Storing the runner's output (kernels.services): build facts and discard reasons, results,
the best variant per bucket, the exported config JSON, and moving a job to a machine without
Django and back (export / ingest)."""
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from controlplane.errors import Conflict, InvalidInput
from kernels.models import KernelBenchmark, KernelBest, KernelBuild, KernelJob
from kernels.services import (
    SHARED_MEM_LIMIT_BYTES,
    build_discard_reason,
    config_filename,
    job_variants_sha256,
    kernel_builds_store,
    kernel_job_create,
    kernel_job_export,
    kernel_job_ingest,
    kernel_results_store,
)
from kernels.runner.package import load_variants, variants_sha256
from kernels.tests.conftest import BASE, H200_DEVICE, T32, T64, build_fact, result_row


def _job(package, node=None, **kw):
    return kernel_job_create(package=package, node=node, cc=kw.pop("cc", "9.0"), dispatch=False, **kw)


def _ids(job) -> dict[str, int]:
    return {v.key: v.pk for v in job.variants.all()}


def test_it_creates_one_variant_per_grid_point_that_passes_the_constraints(toy_package):
    job = _job(toy_package)
    assert job.status == "pending" and job.variants_total == 7
    assert job.grid_summary["combinations"] == 12 and job.grid_summary["pruned_total"] == 5
    assert "waiting for builds and results measured elsewhere" in job.note
    keys = list(job.variants.order_by("ordinal").values_list("key", flat=True))
    assert keys[0] == "impl=baseline,BLOCK=16,num_warps=4" and len(set(keys)) == 7


def test_it_refuses_a_job_with_a_bad_target_shape_or_subset(toy_package, cpu_node):
    with pytest.raises(InvalidInput) as err:
        kernel_job_create(package=toy_package, node=cpu_node, cc=None, shapes=["huge"], batches=[3],
                          params_subset={"impl": ["fast"]})
    errors = err.value.errors
    assert errors["cc"] == ["give the target compute capability (e.g. 9.0): node cpu-box has no GPU to take it from"]
    assert errors["shapes"] == ["'huge' is not a shape of toy_attn (small, wide)"]
    assert errors["batches"] == ["3 is not a batch size of the manifest ([1, 4])"]
    assert errors["params.impl"] == ['\'fast\' is not one of the grid\'s values ["baseline", "tiled"]']
    with pytest.raises(InvalidInput) as err:
        kernel_job_create(package=toy_package, node=cpu_node, cc="sm_90")
    assert err.value.errors == {"cc": ["'sm_90' is not a compute capability such as 9.0 or 12.0"]}


def test_it_keeps_each_shape_and_batch_once_shapes_in_the_order_first_given(toy_package):
    job = _job(toy_package, shapes=["wide", "small", "wide", "small"], batches=[4, 1, 4])
    assert job.shapes == ["wide", "small"] and job.batches == [1, 4]
    with pytest.raises(InvalidInput) as err:
        _job(toy_package, shapes=["huge", "huge"])
    assert err.value.errors["shapes"] == ["'huge' is not a shape of toy_attn (small, wide)"]


def test_it_takes_the_target_from_the_nodes_gpu(toy_package, h200_node, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = kernel_job_create(package=toy_package, node=h200_node)
    assert job.target_cc == "9.0" and job.target == "cuda:90"
    assert len(callbacks) == 1  # the task is sent to node.h200-box only once the row is committed


def test_it_discards_spilling_and_oversized_variants_with_the_reason(toy_package):
    job = _job(toy_package)
    ids = list(_ids(job).values())
    out = kernel_builds_store(job_id=job.pk, payload=[
        build_fact(ids[0]),
        build_fact(ids[1], spills=96),
        build_fact(ids[2], shared=228 * 1024),          # one KiB over sm_90's 227 KiB per block
        build_fact(ids[3], shared=227 * 1024),          # exactly the limit: allowed
        build_fact(ids[4], ok=False, error="CompilationError: out of resources: shared memory"),
    ])
    assert out == {"stored": 5, "ok": 4, "failed": 1, "discarded": 2}
    builds = {b.variant_id: b for b in KernelBuild.objects.filter(variant__job=job)}
    assert builds[ids[0]].discarded is False and builds[ids[0]].tensor_core_evidence == "mma"
    assert builds[ids[1]].discard_reason == "spills 96 bytes of registers to local memory"
    assert builds[ids[2]].discard_reason == ("needs 228.0 KiB of shared memory per block; compute capability 9.0 "
                                             "allows 227 KiB")
    assert builds[ids[3]].discarded is False
    assert builds[ids[4]].ok is False and "out of resources" in builds[ids[4]].error
    job.refresh_from_db()
    assert (job.builds_ok, job.builds_failed, job.builds_discarded, job.compiler) == (4, 1, 2, "triton 3.6.0")


def test_the_shared_memory_limits_follow_the_programming_guides_table():
    assert SHARED_MEM_LIMIT_BYTES["9.0"] == 227 * 1024
    assert SHARED_MEM_LIMIT_BYTES["8.0"] == 163 * 1024
    assert SHARED_MEM_LIMIT_BYTES["8.6"] == SHARED_MEM_LIMIT_BYTES["8.9"] == 99 * 1024
    assert build_discard_reason(cc="8.9", spills_bytes=0, shared_bytes=100 * 1024).startswith("needs 100.0 KiB")
    assert build_discard_reason(cc="9.0", spills_bytes=0, shared_bytes=100 * 1024) == ""


def test_it_refuses_malformed_build_facts_and_stores_nothing(toy_package):
    job = _job(toy_package)
    first = job.variants.first().pk
    with pytest.raises(InvalidInput) as err:
        kernel_builds_store(job_id=job.pk, payload=[build_fact(first), {"variant_id": 999999, "ok": True},
                                                    {"variant_id": first, "ok": "yes"},
                                                    build_fact(first, evidence="tensor")])
    errors = err.value.errors
    assert errors["builds.1.variant_id"] == ["variant_id 999999 is not a variant of this job"]
    assert "builds.2.ok" in errors
    assert errors["builds.3.tensor_core_evidence"] == ["'tensor' must be wgmma, mma or none"]
    assert not KernelBuild.objects.filter(variant__job=job).exists()


def _measure(job, medians: dict[tuple[str, str, int], float], *, wrong=(), device=H200_DEVICE):
    """Store ``medians`` (µs) as the job's results, after a clean build of each measured variant
    that has none yet (as a job run here builds before it benchmarks; a best needs its build)."""
    ids = _ids(job)
    rows = [result_row(ids[key], shape, batch, median_us=us) for (key, shape, batch), us in medians.items()]
    rows += [result_row(ids[key], shape, batch, median_us=1.0, correct=False, max_abs_err=0.5) for key, shape, batch in wrong]
    built = set(KernelBuild.objects.filter(variant__job=job).values_list("variant_id", flat=True))
    unbuilt = sorted({r["variant_id"] for r in rows} - built)
    if unbuilt:
        kernel_builds_store(job_id=job.pk, payload=[build_fact(v) for v in unbuilt])
    return kernel_results_store(job_id=job.pk, payload={"device": device, "results": rows})


def test_it_stores_results_picks_the_best_and_exports_engine_style_configs(toy_package, settings):
    job = _job(toy_package, shapes=["small"])
    out = _measure(job, {
        (BASE, "small", 1): 30.0, (T32, "small", 1): 12.0, (T64, "small", 1): 10.0,
        (BASE, "small", 4): 100.0, (T32, "small", 4): 20.0, (T64, "small", 4): 25.0,
    }, wrong=[("impl=tiled,BLOCK=16,num_warps=8", "small", 1)])
    assert out == {"stored": 7, "correct": 6, "wrong": 1, "best": 2}
    job.refresh_from_db()
    assert (job.device_name, job.device_cc, job.hbm_gbps, job.bf16_tflops) == ("NVIDIA H200", "9.0", 4000.0, 700.0)
    # a wrong variant is never timed, whatever the payload carried
    wrong = KernelBenchmark.objects.get(variant__job=job, correct=False)
    assert wrong.median_us is None and wrong.gbps is None and wrong.max_abs_err == 0.5
    # derived numbers from the manifest's cost and the measured rates
    b = KernelBenchmark.objects.get(variant__key=T64, variant__job=job, shape="small", batch=1)
    nbytes = 1 * 128 * 64 * 2 + 1 * 8 * (64 + 64) * 2
    flops = 2 * 1 * 8 * 128 * (64 + 64)
    assert b.gbps == pytest.approx(nbytes / 10e-6 / 1e9)
    assert b.tflops == pytest.approx(flops / 10e-6 / 1e12)
    roof = max(nbytes / 4000e9, flops / 700e12) * 1e6
    assert b.roofline_us == pytest.approx(roof) and b.bound == "memory"
    assert b.roofline_fraction == pytest.approx(roof / 10.0)
    best = {x.batch: x for x in KernelBest.objects.filter(job=job)}
    assert best[1].variant.key == T64 and best[4].variant.key == T32
    assert best[1].baseline_us == 30.0 and best[1].speedup == pytest.approx(3.0)
    assert best[4].speedup == pytest.approx(5.0) and best[4].compiler == "triton 3.6.0"
    path = (Path(settings.CEILING_KERNEL_CONFIG_DIR) / "toy_attn" / "compiler=triton_3.6.0,cc=9.0"
            / "device_name=NVIDIA_H200,shape=small,dtype=bf16.json")
    assert job.config_paths == [str(path)] and best[1].config_path == str(path)
    assert json.loads(path.read_text()) == {
        "1": {"impl": "tiled", "BLOCK": 64, "num_warps": 4},
        "4": {"impl": "tiled", "BLOCK": 32, "num_warps": 4},
    }


def test_config_files_are_named_as_sglang_and_vllm_name_tuned_configs():
    assert config_filename(device_name="NVIDIA H100 80GB HBM3", shape="v32", dtype="bf16") == \
        "device_name=NVIDIA_H100_80GB_HBM3,shape=v32,dtype=bf16.json"


def test_a_later_job_replaces_a_best_only_when_it_is_faster_or_the_sources_changed(toy_package):
    first = _job(toy_package, shapes=["small"], batches=[1])
    _measure(first, {(T32, "small", 1): 12.0})
    second = _job(toy_package, shapes=["small"], batches=[1])
    _measure(second, {(T64, "small", 1): 14.0})
    best = KernelBest.objects.get(package=toy_package, shape="small", batch=1)
    assert best.job_id == first.pk and best.median_us == 12.0
    third = _job(toy_package, shapes=["small"], batches=[1])
    _measure(third, {(T64, "small", 1): 11.0})
    best.refresh_from_db()
    assert best.job_id == third.pk and best.variant.key == T64
    KernelJob.objects.filter(pk__in=[first.pk, second.pk, third.pk]).update(package_hash="old")
    KernelBest.objects.update(package_hash="old")
    fourth = _job(toy_package, shapes=["small"], batches=[1])
    _measure(fourth, {(BASE, "small", 1): 40.0})
    best.refresh_from_db()
    assert best.job_id == fourth.pk  # new sources: the old measurement no longer stands


def test_it_refuses_results_for_a_discarded_variant_or_an_unknown_shape(toy_package):
    job = _job(toy_package)
    ids = _ids(job)
    kernel_builds_store(job_id=job.pk, payload=[build_fact(ids[T32], spills=8)])
    with pytest.raises(InvalidInput) as err:
        kernel_results_store(job_id=job.pk, payload={"device": H200_DEVICE, "results": [
            result_row(ids[T32], "small", 1, median_us=5.0), result_row(ids[T64], "huge", 1, median_us=5.0),
            result_row(ids[T64], "small", 8, median_us=5.0)]})
    errors = err.value.errors
    assert errors["results.0.variant_id"] == [f"variant {T32} was not benchmarkable: spills 8 bytes of registers "
                                              "to local memory"]
    assert errors["results.1.shape"] == ["'huge' is not a shape of toy_attn"]
    assert errors["results.2.batch"] == ["8 is not a batch of shape small"]
    with pytest.raises(InvalidInput) as err:
        kernel_results_store(job_id=job.pk, payload={"results": []})
    assert err.value.errors == {"device": ["is required"]}
    assert not KernelBenchmark.objects.exists()


def test_it_exports_a_job_and_ingests_what_another_machine_measured(toy_package, tmp_path):
    job = _job(toy_package, shapes=["small"], batches=[1])
    out = kernel_job_export(job=job, out_dir=tmp_path / "export")
    variants = json.loads(Path(out["variants"]).read_text())
    assert [v["variant_id"] for v in variants] == list(job.variants.order_by("ordinal").values_list("pk", flat=True))
    assert variants[0]["params"] == {"impl": "baseline", "BLOCK": 16, "num_warps": 4}
    assert sorted(p.name for p in Path(out["package"]).iterdir()) == ["kernel.py", "manifest.toml", "reference.py"]
    info = json.loads(Path(out["job"]).read_text())
    assert info["target"] == "cuda:90" and info["commands"][0].startswith("python -m kernels.runner compile")
    with pytest.raises(InvalidInput):
        kernel_job_export(job=job, out_dir=tmp_path / "export")  # not empty any more
    ids = _ids(job)
    builds = [build_fact(pk) for pk in ids.values()]
    results = {"device": H200_DEVICE, "results": [result_row(ids[T32], "small", 1, median_us=9.0),
                                                  result_row(ids[BASE], "small", 1, median_us=27.0)]}
    (tmp_path / "builds.json").write_text(json.dumps(builds))
    (tmp_path / "results.json").write_text(json.dumps(results))
    call_command("kernel_job_ingest", str(job.pk), str(tmp_path / "results.json"), "--builds", str(tmp_path / "builds.json"))
    job.refresh_from_db()
    assert job.status == "done" and job.builds_ok == 7 and job.benchmarks_correct == 2
    assert job.note == "results measured on NVIDIA H200 (cc 9.0) were ingested"
    best = KernelBest.objects.get(job=job)
    assert best.variant.key == T32 and best.speedup == pytest.approx(3.0)


def test_the_ingest_report_tells_this_files_rows_from_the_jobs_totals(toy_package, tmp_path):
    job = _job(toy_package, shapes=["small"], batches=[1])
    ids = _ids(job)
    (tmp_path / "builds.json").write_text(json.dumps([build_fact(pk) for pk in ids.values()]))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"device": H200_DEVICE, "results": [
        result_row(ids[T32], "small", 1, median_us=9.0), result_row(ids[BASE], "small", 1, median_us=27.0),
        result_row(ids[T64], "small", 1, median_us=1.0, correct=False)]}))
    out = StringIO()
    call_command("kernel_job_ingest", str(job.pk), str(results), "--builds", str(tmp_path / "builds.json"), stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[:3] == [
        f"kernel job #{job.pk}: done",
        "  builds: stored 7 rows from this file; the job now holds 7 built (0 of them discarded), 0 failed",
        "  results: stored 3 rows from this file; the job now holds 3 measurements: 2 correct, 1 wrong"]
    # an empty results file would store nothing: refused, and the job keeps what it holds
    results.write_text(json.dumps({"device": H200_DEVICE, "results": []}))
    with pytest.raises(CommandError, match=f"nothing was stored: results: the results file holds no measurement: "
                                           f"there is nothing to store into kernel job #{job.pk}$"):
        call_command("kernel_job_ingest", str(job.pk), str(results), stdout=StringIO())
    job.refresh_from_db()
    assert (job.benchmarks_total, job.benchmarks_correct, job.benchmarks_wrong) == (3, 2, 1)
    with pytest.raises(CommandError, match="give a job id"):
        call_command("kernel_job_ingest", "\u00b2", str(results))


def test_ingest_refuses_results_measured_from_another_variants_list(toy_package, tmp_path):
    job, other = _job(toy_package, shapes=["small"], batches=[1]), _job(toy_package)
    out = kernel_job_export(job=job, out_dir=tmp_path / "export")
    # the runner's fingerprint of the exported file is the job's own, and job.json names it
    ours = variants_sha256(load_variants(out["variants"]))
    assert job_variants_sha256(job=job) == [ours]
    assert json.loads(Path(out["job"]).read_text())["variants_sha256"] == ours
    ids = _ids(job)
    rows = [result_row(ids[T32], "small", 1, median_us=9.0), result_row(ids[BASE], "small", 1, median_us=27.0)]
    # A variants list numbered like this job's but meaning other parameters (another database's
    # job): without the fingerprint its rows would land on the wrong variants.
    exported = json.loads(Path(out["variants"]).read_text())
    shuffled = [{"variant_id": v["variant_id"], "params": w["params"]} for v, w in zip(exported, exported[::-1])]
    theirs = variants_sha256(load_variants(kernel_job_export(job=other, out_dir=tmp_path / "other")["variants"]))
    for foreign in (variants_sha256(shuffled), theirs):
        path = tmp_path / "foreign-results.json"
        path.write_text(json.dumps({"device": H200_DEVICE, "variants_sha256": foreign, "results": rows}))
        with pytest.raises(CommandError) as err:
            call_command("kernel_job_ingest", str(job.pk), str(path), stderr=StringIO())
        message = str(err.value)
        assert message.startswith("nothing was stored: variants_sha256: the results file was measured from a "
                                  "different variants list")
        assert foreign in message and ours in message and "would be stored against the wrong parameters" in message
    assert not KernelBenchmark.objects.exists()
    job.refresh_from_db()
    assert job.status == "pending"
    with pytest.raises(InvalidInput) as err:
        kernel_job_ingest(job=job, results={"device": H200_DEVICE, "variants_sha256": "abc", "results": rows})
    assert "64 lowercase hex digits" in err.value.errors["variants_sha256"][0]
    # the file bench wrote from this job's own variants.json goes in
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"device": H200_DEVICE, "variants_sha256": ours, "results": rows}))
    call_command("kernel_job_ingest", str(job.pk), str(path), stdout=StringIO())
    job.refresh_from_db()
    assert job.status == "done" and job.benchmarks_correct == 2


def test_ingest_matches_the_variants_the_export_sent_once_builds_were_refused(toy_package, tmp_path):
    job = _job(toy_package, shapes=["small"], batches=[1])
    ids = _ids(job)
    kernel_builds_store(job_id=job.pk, payload=[build_fact(pk) for key, pk in ids.items() if key != T64]
                        + [build_fact(ids[T64], spills=8)])
    sent = load_variants(kernel_job_export(job=job, out_dir=tmp_path / "export")["variants"])
    assert len(sent) == 6 and job_variants_sha256(job=job)[1] == variants_sha256(sent)
    out = kernel_job_ingest(job=job, results={"device": H200_DEVICE, "variants_sha256": variants_sha256(sent),
                                              "results": [result_row(ids[T32], "small", 1, median_us=9.0)]})
    assert out["results"]["stored"] == 1


def test_results_without_a_fingerprint_still_pair_by_id_and_refuse_ids_the_job_lacks(toy_package, tmp_path):
    job, other = _job(toy_package, shapes=["small"], batches=[1]), _job(toy_package)
    ids, other_ids = _ids(job), _ids(other)
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"device": H200_DEVICE, "results": [
        result_row(ids[T32], "small", 1, median_us=9.0), result_row(other_ids[BASE], "small", 1, median_us=27.0)]}))
    err_out = StringIO()
    with pytest.raises(CommandError, match=f"nothing was stored: results.1.variant_id: variant_id {other_ids[BASE]} "
                                           "is not a variant of this job"):
        call_command("kernel_job_ingest", str(job.pk), str(path), stderr=err_out)
    assert not KernelBenchmark.objects.exists()
    path.write_text(json.dumps({"device": H200_DEVICE, "results": [result_row(ids[T32], "small", 1, median_us=9.0)]}))
    call_command("kernel_job_ingest", str(job.pk), str(path), stdout=StringIO())
    assert KernelBenchmark.objects.get().variant.key == T32


def test_it_does_not_ingest_into_a_running_failed_or_cancelled_job(toy_package):
    job = _job(toy_package)
    for status in ("building", "failed", "cancelled"):
        KernelJob.objects.filter(pk=job.pk).update(status=status)
        with pytest.raises(Conflict):
            kernel_job_ingest(job=job, results={"device": H200_DEVICE, "results": []})


def test_a_malformed_ingest_leaves_a_waiting_job_waiting(toy_package):
    job = _job(toy_package)
    with pytest.raises(InvalidInput):
        kernel_job_ingest(job=job, results={"device": {"name": "NVIDIA H200", "cc": "nine"}, "results": []})
    job.refresh_from_db()
    assert job.status == "pending" and job.started_at is None
