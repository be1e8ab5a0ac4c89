"""``manage.py seed`` and ``manage.py demo``: idempotent seeding and an honest demo login."""
import io
import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from deployments.models import Node, Recipe


@pytest.fixture
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.CEILING_MODEL_ROOTS = ["/models", str(tmp_path / "models")]
    return tmp_path


def _run(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def test_it_seeds_nodes_recipes_and_a_working_login_once(db, var_dir):
    _run("seed")
    assert set(Node.objects.values_list("name", flat=True)) >= {"local", "seed-8gpu"}
    assert Node.objects.get(name="seed-8gpu").gpus.count() == 8
    names = set(Recipe.objects.values_list("name", flat=True))
    assert names == {"seed-v4-flash-pd", "seed-v4-flash-tp4", "local-sim-pd", "local-llamacpp", "local-sim-single"}
    login = json.loads((var_dir / "demo-login.json").read_text())
    assert (var_dir / "demo-login.json").stat().st_mode & 0o777 == 0o600
    assert User.objects.get(username="admin").check_password(login["password"])
    # A second run changes nothing: same recipes at version 1, same password.
    _run("seed")
    assert Recipe.objects.count() == 5
    assert set(Recipe.objects.values_list("version", flat=True)) == {1}
    assert json.loads((var_dir / "demo-login.json").read_text()) == login


def test_it_keeps_a_password_a_person_changed(db, var_dir):
    _run("seed")
    user = User.objects.get(username="admin")
    user.set_password("my-own-long-password")
    user.save()
    out = _run("demo", "--no-deploy")
    user.refresh_from_db()
    assert user.check_password("my-own-long-password")
    assert "the password you set" in out
    assert "local-sim-pd" in out and "/dry-run/" in out


def test_the_demo_prints_the_password_on_a_terminal_only(db, var_dir):
    from deployments.management.commands.demo import demo_login_line
    from deployments.management.commands.seed import demo_login_ensure

    path = var_dir / "demo-login.json"
    path.write_text(json.dumps({"username": "admin", "password": "s3cret-Pass-word"}))
    path.chmod(0o644)
    username, password = demo_login_ensure()
    assert (username, password) == ("admin", "s3cret-Pass-word")
    assert path.stat().st_mode & 0o777 == 0o600
    assert demo_login_line(username, password, terminal=True) == (
        f"  login:     admin / s3cret-Pass-word   (kept in {path})")
    piped = demo_login_line(username, password, terminal=False)
    assert "s3cret-Pass-word" not in piped
    assert piped == (f"  login:     admin / the password in {path} (mode 0600; not printed because this "
                     "output is not a terminal)")
    # call_command's StringIO is not a terminal: the command's output names the file only
    out = _run("demo", "--no-deploy")
    assert "s3cret-Pass-word" not in out and f"the password in {path} (mode 0600" in out
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.timeout(120)
def test_a_deploy_the_product_refuses_is_one_line_and_the_demo_goes_on_to_its_kernel_step(db, var_dir):
    from django.core.management.base import CommandError

    from deployments.choices import DeploymentStatus, ProcessStatus, Role
    from deployments.models import Deployment, ServerProcess
    from deployments.services import recipe_plan
    from deployments.tests.factories import recipe_row_create

    _run("seed")
    local = Node.objects.get(name="local")
    # another recipe's active deployment on this node holds every port the demo's recipes need
    squatter = recipe_row_create(node=local, name="squatter")
    held = Deployment.objects.create(recipe=squatter, recipe_version=1, spec_snapshot={}, node=local,
                                     status=DeploymentStatus.READY)
    for ordinal, name in enumerate(("local-sim-pd", "local-llamacpp", "local-sim-single")):
        ports = [port for p in recipe_plan(recipe=Recipe.objects.get(name=name)).processes for port in p.ports.values()]
        ServerProcess.objects.create(deployment=held, role=Role.SINGLE, ordinal=ordinal, status=ProcessStatus.READY,
                                     ports={str(i): port for i, port in enumerate(ports)})
    out = io.StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("demo", "--no-sweep", "--timeout", "1", stdout=out)
    lines = out.getvalue().splitlines()
    refused = [line for line in lines if ": deploy refused: " in line]
    # every recipe the demo deploys is deployed (and proven) before the sweeps, the single-node
    # baseline too: the README's step 7 names the same three
    assert [line.split(":")[0] for line in refused] == ["  local-sim-pd", "  local-llamacpp", "  local-sim-single"], lines
    assert all("squatter" in line for line in refused), refused
    # the steps after the deploys still ran: the kernel step and the closing lines
    assert any(line.startswith("  what-if: ") and line.endswith("/kernels/whatif/") for line in lines), lines
    assert lines[-1] == "Stop everything with: make stop"
    assert str(failed.value).startswith("not proven: local-sim-pd (deploy refused: ")
    assert "\n" not in str(failed.value)
    assert not Deployment.objects.exclude(pk=held.pk).exists()


def test_the_demo_says_the_product_is_up_only_when_its_web_server_answers(db, var_dir, settings):
    """``demo --no-deploy`` is run to see the login again, also while the services are stopped: then
    it must not say "Ceiling is up". A real HTTP server on a free port stands for the web server."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Login(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/login/" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Login)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.CEILING_UI_URL = f"http://127.0.0.1:{server.server_address[1]}/"
        out = _run("demo", "--no-deploy")
        assert f"Ceiling is up: http://127.0.0.1:{server.server_address[1]}/\n" in out
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as probe:   # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    settings.CEILING_UI_URL = f"http://127.0.0.1:{closed}/"
    out = _run("demo", "--no-deploy")
    assert "Ceiling is up" not in out
    assert (f"Ceiling's web server is not answering at http://127.0.0.1:{closed}/ (`make demo` starts it, "
            "`make status` shows the services)") in out
    assert "login:" in out   # the login is still shown
