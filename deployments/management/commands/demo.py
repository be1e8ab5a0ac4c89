"""``manage.py demo``: the main job on the embedded default, printed as it happens.

Run by ``make demo`` once the services (web, worker, beat, node agent) are up. It prints the
URL and login, deploys the local PD recipe (sim prefill + sim decode + the real sglang-router),
the llama.cpp recipe and the single-node sim recipe (the baseline its sweeps compare PD with)
through the same service as the UI, waits for the node agent to prove them ready, sends one
streamed request through each entry URL, and prints what it observed (pids, the pinning read
back from ``/proc``, TTFT, tokens) for each of the three.
Then it sweeps: ``local-sim-single`` at c = 1 (the single-node baseline; the seed measured its
single-node run at bs = 1 only), ``local-sim-pd`` at c = 1, 8, 16 (its analysis then compares PD
with that baseline per GPU) and ``local-llamacpp`` at c = 1, 8, 16, printing one results table per
sweep and the ceiling findings; the sweeps stay in the UI and API. Sim sweeps: 256 in / 256 out,
c requests per point (one request per slot: the seed profile's TPOT is 94-510 ms, so a 256-token
request takes 24-130 s), time-scale 1.0 (the profile's real-time numbers). llama.cpp: 64 in /
64 out, 2 x c requests per point, because the tiny model on 2 CPU cores makes 256/256 at c = 16
take minutes.
A deployment that already has a sweep (one started from the UI or API while the demo runs: one
sweep per deployment at a time) is swept once that sweep ends: the demo names it and how to cancel
it, and waits up to ``--sweep-timeout`` seconds; if it still holds the deployment then, that sweep
of the demo is skipped, said in one line after the tables (no numbers), and the demo goes on.
Exit status 1 when a deployment did not become ready or was refused, its request failed, or a sweep
failed or was refused (said in one line, as any other refusal of the product is, never a traceback).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from controlplane.commands import CeilingCommand
from controlplane.errors import CeilingError, Conflict
from deployments.demo_run import DemoAlreadyRunning, DemoRun, DemoStopped
from deployments.demo import DeployProof, demo_cpu_sharing, demo_deploy_and_prove, demo_recipe_lines
from deployments.management.commands.seed import DEMO_USERNAME, demo_login_ensure
from deployments.models import Recipe

if TYPE_CHECKING:
    from benchmarks.models import BenchmarkSweep

#: The recipes the demo deploys and proves first, in order (pids, pinning read back, a streamed
#: request): every recipe :data:`DEMO_SWEEPS` sweeps, so each deployment the wall then shows live
#: was proven the same way.
DEMO_RECIPES = ("local-sim-pd", "local-llamacpp", "local-sim-single")
# (recipe, lengths, concurrencies, requests per concurrency, warmup requests per point, why): the
# demo's sweeps, in order. llama.cpp gets 2 warm-up requests per point: its first requests after a
# start (or after the previous point's load) were several times slower than the rest on a busy
# 2-core host, which made per-token time appear to fall with concurrency; and 10 requests per slot,
# so even its c = 1 point completes the 10 requests the ceiling analysis compares points on
# (benchmarks.analysis.model.MIN_COMPARED_REQUESTS): 160 requests of 64 tokens at c = 16 take
# about 12 s there. The sim sweeps keep one request per slot: the seed profile decodes in real
# time (about 25 s for one request of 256 tokens at c = 1), so their c = 1 and c = 8 points stay
# named as too few to conclude from.
# local-sim-single goes first and only at c = 1 (the seed measured its single-node TP4 run at
# bs = 1 only): it is the baseline the PD sweep's analysis compares against, so it must be
# finished before the PD sweep is analysed.
DEMO_SWEEPS = (
    ("local-sim-single", "256:256", [1], 1, 0, "sim single-node TP4 baseline for the PD-vs-single comparison"),
    ("local-sim-pd", "256:256", [1, 8, 16], 1, 0, "sim PD, the seed profile in real time"),
    ("local-llamacpp", "64:64", [1, 8, 16], 10, 2,
     "64/64: the tiny model on 2 CPU cores would need minutes for 256/256 at c=16"),
)


def demo_login_line(username: str, password: str | None, *, terminal: bool) -> str:
    """The demo's login line. The password itself only when ``terminal`` (stdout is a terminal):
    output redirected to a file or a pipe would otherwise copy it out of ``var/demo-login.json``
    (mode 0600) into a file anyone may read; then the line names that file instead. A password
    changed since (``password`` None) is never printed: the line says to delete the file."""
    where = Path(settings.VAR_DIR) / "demo-login.json"
    if password is None:
        return (f"  login:     {username} / (the password you set; delete {where} "
                "and re-run to get a new one)")
    if terminal:
        return f"  login:     {username} / {password}   (kept in {where})"
    return (f"  login:     {username} / the password in {where} (mode 0600; not printed because "
            "this output is not a terminal)")


#: What the process table's effective columns are read from (deployments.pinning.pinning_read):
#: CPUs from the status file, memory nodes from the memory policy of numa_maps (numactl --membind
#: sets a policy, which the cpuset's Mems_allowed_list does not show), else from that cpuset list.
PINNING_READ_NOTE = ("(CPUs: Cpus_allowed_list of /proc/<pid>/status; mem nodes: the bind/interleave policy "
                     "in /proc/<pid>/numa_maps, else Mems_allowed_list)")


def web_answers(base: str, timeout_s: float = 2.0) -> bool:
    """Whether the web server answers ``GET <base>/login/`` (any HTTP status below 500) within
    ``timeout_s`` seconds: the demo says "Ceiling is up" only then (``--no-deploy`` is also run
    while the services are stopped, to see the login again)."""
    import httpx

    try:
        return httpx.get(f"{base}/login/", timeout=timeout_s).status_code < 500
    except httpx.HTTPError:
        return False


class Command(CeilingCommand):
    help = "Deploy the local demo recipes, prove them ready with a streamed request, and print the results."

    def add_arguments(self, parser):
        parser.add_argument("--no-deploy", action="store_true", help="only print the URL, login and recipes")
        parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each deployment")
        parser.add_argument("--no-sweep", action="store_true", help="deploy and prove only; skip the sweeps")
        parser.add_argument("--sweep-timeout", type=float, default=600.0,
                            help="seconds to follow each sweep, and to wait for another sweep of its deployment")

    def handle(self, *args, **options):
        try:
            self._demo(**options)
        except DemoStopped as exc:
            # `make stop` in another terminal: it stops the deployments and services once this ends.
            raise CommandError(str(exc), returncode=143) from exc
        except DemoAlreadyRunning as exc:
            raise CommandError(f"refused: {exc}") from exc
        except CeilingError as exc:
            # A refusal no step expected: its reason on one line (exit status 1), not a traceback.
            raise CommandError(f"refused: {exc}") from exc

    def _demo(self, **options) -> None:
        base = settings.CEILING_UI_URL.rstrip("/")
        username, password = demo_login_ensure()
        out = self.stdout
        out.write("")
        if web_answers(base):
            out.write(f"Ceiling is up: {base}/")
        else:
            out.write(f"Ceiling's web server is not answering at {base}/ (`make demo` starts it, "
                      "`make status` shows the services)")
        out.write(demo_login_line(username, password, terminal=out.isatty()))
        out.write(f"  API docs:  {base}/api/docs/     admin: {base}/admin/")
        out.write("")
        out.write("Recipes:")
        for line in demo_recipe_lines(base=base):
            out.write(line)
        if options["no_deploy"]:
            return
        # While it deploys and sweeps, `make stop` (services.py stop-demo) can find and end it.
        with DemoRun(Path(settings.VAR_DIR) / "run"):
            self._deploy_and_sweep(base=base, out=out, **options)

    def _deploy_and_sweep(self, *, base: str, out, **options) -> None:
        user = User.objects.get(username=DEMO_USERNAME)
        proofs: list[DeployProof] = []
        refused: list[str] = []
        out.write("")
        out.write("Deploying (the node agent starts, pins and probes each process):")
        for name in DEMO_RECIPES:
            recipe = Recipe.objects.filter(name=name).first()
            if recipe is None:
                out.write(f"  {name}: not found (run `manage.py seed`)")
                continue
            try:
                proofs.append(demo_deploy_and_prove(recipe=recipe, user=user, timeout_s=options["timeout"],
                                                    progress=out.write))
            except CeilingError as exc:  # refused (a port or GPU held by another deployment): said, not raised
                out.write(f"  {name}: deploy refused: {exc}")
                refused.append(f"{name} (deploy refused: {exc})")
        for proof in proofs:
            self._report(proof, base)
        failed = refused + [p.recipe for p in proofs if not p.ok]
        if not options["no_sweep"] and not failed:
            failed += self._sweeps(user=user, base=base, timeout_s=options["timeout"],
                                   sweep_timeout_s=options["sweep_timeout"])
        self._kernels(base)
        out.write("")
        out.write(f"Live: the wall display {base}/wall/, node page {base}/nodes/, deployment pages above "
                  "(GPU memory, health, tok/s streamed over a websocket while the engines run).")
        out.write("Stop everything with: make stop")
        if failed:
            raise CommandError(f"not proven: {', '.join(failed)} (see the deployment and sweep pages and var/logs/)")

    def _kernels(self, base: str) -> None:
        """Store the sparse MLA decode packages' H200 jobs (measured on a GPU host by the runner,
        ``kernels/packages/<name>/results/``: the Triton flagship, the CUDA wgmma package and the
        FP8-cache package) through ``kernel_job_ingest --new`` once each, so their variant tables and
        best configs are in the UI; a host with a GPU can run its own."""
        from django.conf import settings as dj_settings

        from kernels.selectors import best_list, best_time_comparison, job_result_lines
        from kernels.models import KernelJob

        out = self.stdout
        out.write("")
        for name, what in (("sparse_mla_decode", "Triton"), ("sparse_mla_decode_cuda", "CUDA, wgmma"),
                           ("sparse_mla_decode_fp8", "Triton, FP8 cache")):
            results = Path(dj_settings.BASE_DIR) / "kernels" / "packages" / name / "results"
            job = KernelJob.objects.filter(package__name=name, device_name="NVIDIA H200",
                                           status="done").order_by("-pk").first()
            if job is not None:
                # Stored by an earlier run: its results again, as the ingest printed them then.
                out.write(f"Kernel results: the {name} job ({what}) measured on an NVIDIA H200, stored earlier "
                          f"(kernel job #{job.pk}: {job.benchmarks_correct} of {job.benchmarks_total} measurements "
                          "correct):")
                for line in job_result_lines(job):
                    out.write(line)
            elif (results / "h200-results.json").exists():
                out.write(f"Kernel results: the {name} job ({what}) measured on an NVIDIA H200 (stored files):")
                call_command("kernel_job_ingest", str(results / "h200-results.json"), new=name,
                             variants=str(results / "h200-variants.json"), builds=str(results / "sm90a-builds.json"),
                             stdout=out)
                job = KernelJob.objects.filter(package__name=name).order_by("-pk").first()
            if job is not None:
                out.write(f"  kernel job #{job.pk} ({name}): {base}/kernels/jobs/{job.pk}/")
        # Their speedups are each over the package's own baseline: the packages compared by time.
        notes = best_time_comparison(list(best_list()))
        if notes:
            out.write("Kernel results compared by time (median µs on the same device, shape and batch):")
            for note in notes:
                out.write(f"  {note}")
        out.write(f"  what-if: {base}/kernels/whatif/")

    def _sweeps(self, *, user, base: str, timeout_s: float, sweep_timeout_s: float) -> list[str]:
        """Sweep each demo recipe (deploying one not ready yet), print the tables and
        findings; returns the names of recipes whose sweep did not finish or was refused. A recipe
        whose deployment another sweep held for longer than ``sweep_timeout_s``
        (:meth:`_sweep_create_or_wait`) is not swept, says so after the tables and is not a failure."""
        from benchmarks.services import sweep_report_text, sweep_wait
        from deployments.choices import DeploymentStatus
        from deployments.models import Deployment

        out = self.stdout
        failed: list[str] = []
        skipped: list[str] = []
        notes: dict[int, str] = {}
        out.write("")
        out.write("Benchmark sweeps (run by the control worker; live progress on the sweep pages):")
        sweeps = []
        for name, lengths, concurrency, per_c, warmup, why in DEMO_SWEEPS:
            recipe = Recipe.objects.filter(name=name).first()
            if recipe is None:
                out.write(f"  {name}: not found (run `manage.py seed`)")
                failed.append(name)
                continue
            deployment = Deployment.objects.filter(recipe=recipe, status=DeploymentStatus.READY).first()
            if deployment is None:
                try:
                    proof = demo_deploy_and_prove(recipe=recipe, user=user, timeout_s=timeout_s, progress=out.write)
                except CeilingError as exc:
                    out.write(f"  {name}: deploy refused: {exc}")
                    failed.append(f"{name} (deploy refused: {exc})")
                    continue
                if not proof.ok:
                    self._report(proof, base)
                    failed.append(name)
                    continue
                deployment = Deployment.objects.get(pk=proof.deployment_id)
            out.write(f"  {name}: c = {', '.join(map(str, concurrency))}, {lengths} in/out tokens, "
                      f"{per_c} x c requests per point" + (f" after {warmup} warm-up requests" if warmup else "")
                      + f" ({why})")
            sharing = demo_cpu_sharing(recipe=recipe)
            if sharing:
                out.write(f"    {sharing}")
            grid = {"concurrency": concurrency, "lengths": [lengths], "requests_per_concurrency": per_c,
                    "warmup": warmup}
            try:
                sweep, note = self._sweep_create_or_wait(deployment=deployment, user=user, grid=grid, base=base,
                                                         wait_s=sweep_timeout_s)
            except CeilingError as exc:  # a refusal other than another sweep (a stop, an offline agent)
                out.write(f"  {name}: sweep refused: {exc}")
                failed.append(f"{name} sweep (refused: {exc})")
                continue
            if sweep is None:
                skipped.append(f"{name}: {note}")
                continue
            if note:
                notes[sweep.pk] = note
            # One at a time: concurrent sweeps on a 2-core host would measure each other.
            sweep = sweep_wait(sweep=sweep, timeout_s=sweep_timeout_s, progress=out.write, poll_s=2.0)
            sweeps.append(sweep)
            if sweep.status != "done":
                failed.append(f"{name} sweep ({sweep.status}: {sweep.reason or 'timed out'})")
        for sweep in sweeps:
            out.write("")
            out.write(sweep_report_text(sweep=sweep))
            out.write(f"  {base}/api/sweeps/{sweep.pk}/   {base}/api/sweeps/{sweep.pk}/analysis/")
            if sweep.pk in notes:
                out.write(f"  ({notes[sweep.pk]})")
        for line in skipped:
            out.write("")
            out.write(f"Not swept by the demo, so no results: {line}")
        return failed

    def _sweep_create_or_wait(self, *, deployment, user, grid: dict, base: str,
                              wait_s: float) -> tuple[BenchmarkSweep | None, str]:
        """Create the demo's sweep of ``deployment``; while another sweep is active on it (one
        started from the UI or API meanwhile: one active sweep per deployment, so the create is
        refused), say which and how to cancel it, follow it for up to ``wait_s`` seconds in all,
        then create. Returns ``(sweep, note)``, the note saying how long the demo waited for
        which sweep ("" when it did not), or ``(None, why)`` when the other sweep still held the
        deployment after ``wait_s``: the demo skips that sweep rather than measure alongside it.
        Any other refusal (:class:`controlplane.errors.CeilingError`) is raised."""
        from benchmarks.choices import SWEEP_ACTIVE
        from benchmarks.models import BenchmarkSweep
        from benchmarks.services import sweep_create, sweep_wait

        out = self.stdout
        start = time.monotonic()
        waited_for: list[int] = []
        while True:
            busy = (BenchmarkSweep.objects.filter(deployment=deployment, status__in=SWEEP_ACTIVE)
                    .order_by("pk").first())
            if busy is None:
                try:
                    sweep = sweep_create(deployment=deployment, user=user, grid=grid)
                except Conflict:
                    if not BenchmarkSweep.objects.filter(deployment=deployment, status__in=SWEEP_ACTIVE).exists():
                        raise
                    continue  # another sweep was created meanwhile: wait for it as above
                waited = ", ".join(f"#{pk}" for pk in waited_for)
                return sweep, (f"the demo waited {time.monotonic() - start:.0f} s for sweep {waited} on deployment "
                               f"#{deployment.pk} to end before starting this one" if waited_for else "")
            left = wait_s - (time.monotonic() - start)
            if left <= 0:
                return None, (f"sweep #{busy.pk} ({busy.name + ', ' if busy.name else ''}{busy.status}) still held deployment #{deployment.pk} "
                              f"after {wait_s:.0f} s of waiting; see {base}/benchmarks/sweeps/{busy.pk}/")
            if busy.pk not in waited_for:
                waited_for.append(busy.pk)
                who = f" by {busy.created_by.get_username()}" if busy.created_by_id else ""
                out.write(f"    sweep #{busy.pk}{who} is already {busy.status} on deployment #{deployment.pk} "
                          f"(one sweep per deployment at a time): waiting up to {left:.0f} s for it to end, then "
                          f"the demo sweeps; cancel it at {base}/benchmarks/sweeps/{busy.pk}/ or with "
                          f"POST {base}/api/sweeps/{busy.pk}/cancel/")
            sweep_wait(sweep=busy, timeout_s=left, progress=out.write, poll_s=2.0)

    def _report(self, proof: DeployProof, base: str) -> None:
        out = self.stdout
        out.write("")
        ready = f"ready after {proof.ready_after_s:.1f} s" if proof.ready_after_s is not None else proof.status
        out.write(f"{proof.recipe}: deployment #{proof.deployment_id} {ready}"
                  + (f" — {proof.reason}" if proof.reason and proof.status != "ready" else "")
                  + f"   {base}/deployments/{proof.deployment_id}/")
        out.write(f"  {'role':8s} {'pid':>7s}  {'status':8s} {'pinned (recipe)':16s} {'effective CPUs':15s} "
                  f"{'NUMA mem nodes':14s} verified {PINNING_READ_NOTE}")
        for p in proof.processes:
            mark = {True: "yes", False: "NO", None: "-"}[p["pinning_verified"]]
            out.write(f"  {p['role']:8s} {p['pid'] or '-':>7}  {p['status']:8s} {(p['cpus'] or 'any'):16s} "
                      f"{(p['effective_cpus'] or '-'):15s} {(p['effective_mems'] or '-'):14s} {mark}")
        s = proof.stream
        if s is None:
            out.write("  streamed request: not sent (deployment not ready)")
        elif s.error:
            out.write(f"  streamed request: FAILED — {s.error}")
        else:
            out.write(f"  streamed request through the entry URL: HTTP {s.status}, TTFT {s.ttft_s * 1000:.0f} ms, "
                      f"{s.events} content events, "
                      + (f"usage.completion_tokens={s.completion_tokens}, " if s.completion_tokens is not None
                         else "no usage from the server (tokens counted from events), ")
                      + f"E2E {s.e2e_s * 1000:.0f} ms")
            out.write(f"    text: {s.text[:100]!r}")
