"""The load generator when its target goes away: a real ``sim`` engine killed mid-run, a real sim
behind a TCP front that resets chosen connections before any response byte (a network fault, not
a stand-in for the engine), and a real sim that answers every generation with HTTP 500."""
from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from benchmarks.loadgen import Api, LoadConfig, loadgen_run, random_dataset, run_summary
from benchmarks.loadgen.driver import UNREACHABLE_FAILURES
from benchmarks.tests.sweep_support import sim_start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _config(base: str, *, concurrency: int, **extra) -> LoadConfig:
    return LoadConfig(base_url=base, api=Api.GENERATE, model="sim-model", concurrency=concurrency, ignore_eos=True,
                      **extra)


def _specs(n: int, output_len: int = 4):
    return random_dataset(num=n, input_len=8, output_len=output_len, seed=1, token_ids=True)


class ResettingFront:
    """A TCP front on a free loopback port: the connections whose ordinal (0-based, in accept
    order) is in ``resets`` are reset (SO_LINGER 0, closed before a byte is read or written);
    every other connection is relayed byte for byte to ``127.0.0.1:target_port``."""

    def __init__(self, target_port: int, resets: set[int]) -> None:
        self.target_port, self.resets = target_port, resets
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            ordinal, self.accepted = self.accepted, self.accepted + 1
            if ordinal in self.resets:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_it_stops_sending_once_its_target_died_and_counts_only_what_it_sent(tmp_path: Path) -> None:
    base, proc = sim_start(tmp_path / "sim.log")
    port = int(base.rsplit(":", 1)[1])
    killed: list[float] = []

    def progress(report: dict) -> None:
        if report["done"] >= 8 and not killed:
            proc.kill()  # the engine dies mid-run, as a router did in a real run
            killed.append(time.monotonic())

    try:
        result = loadgen_run(config=_config(base, concurrency=4), specs=_specs(3000, output_len=32),
                             progress=progress)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    stopped_after = time.monotonic() - killed[0]
    s = run_summary(result)

    assert result.stopped_early == s["stopped_early"] == (
        f"target unreachable: {UNREACHABLE_FAILURES} consecutive connection failures "
        f"(connection refused to 127.0.0.1:{port})")
    assert stopped_after < 2.0, f"{stopped_after:.2f} s from the kill to the end of the run"
    # Sent requests are all counted (successes before the kill, failures after); the rest were
    # never sent and are not failures.
    assert s["requests"] == len(result.records) == s["successes"] + s["failures"]
    assert s["not_sent"] == result.not_sent == 3000 - s["requests"] and s["not_sent"] > 2900
    assert s["successes"] >= 8
    errors = list(result.records.errors.values())
    # The requests streaming when the engine died failed inside their bodies (the server had
    # answered); every other failure is one the server never answered: refused, or cut before any
    # response byte. 32 of those in a row ended the run, plus at most the other 3 slots' racing the
    # 32nd and the 4 requests in flight. A connect that races the dying listener's close is reset
    # rather than refused (the kernel had queued it on the listen backlog): also unanswered.
    in_body = [e for e in errors if "inside the response body" in e]
    unanswered = [e for e in errors if e not in in_body]
    assert len(in_body) <= 4, in_body
    assert UNREACHABLE_FAILURES <= len(unanswered) <= UNREACHABLE_FAILURES + 3 + 4, unanswered
    assert all("ConnectionRefusedError" in e or "before the response headers were complete" in e
               or "before any response byte" in e
               or e.startswith(f"cannot connect to 127.0.0.1:{port}: ConnectionResetError") for e in unanswered), \
        unanswered
    assert sum("ConnectionRefusedError" in e for e in unanswered) >= UNREACHABLE_FAILURES - 4
    assert s["flags"]["concurrency_shortfall"] is False


def test_it_rides_out_resets_fewer_than_the_limit_in_a_row_and_stops_at_the_limit(sim_url: str) -> None:
    target = int(sim_url.rsplit(":", 1)[1])
    # One slot, a new connection per request: connection ordinal = request order. Three resets,
    # an answered request, then one reset fewer than the limit, then answered requests again.
    blips = {0, 1, 2} | set(range(4, 4 + UNREACHABLE_FAILURES - 1))
    front = ResettingFront(target, blips)
    try:
        n = 4 + UNREACHABLE_FAILURES - 1 + 2
        result = loadgen_run(config=_config(f"http://127.0.0.1:{front.port}", concurrency=1, force_close=True),
                             specs=_specs(n))
    finally:
        front.close()
    s = run_summary(result)
    assert result.stopped_early is None and s["stopped_early"] is None and s["not_sent"] == 0
    assert (s["requests"], s["failures"], s["successes"]) == (n, len(blips), n - len(blips))
    # A reset lands during the connect or just after it, before any response byte either way.
    assert all(e.startswith(f"cannot connect to 127.0.0.1:{front.port}: ConnectionResetError")
               or e.startswith("connection lost (ConnectionResetError") and e.endswith("before the response headers "
                                                                                      "were complete")
               for e in result.records.errors.values()), result.records.errors
    assert result.records.column("ok").tolist()[3] == 1  # the answered request between the blips

    # The same front with the limit reached: the run stops there.
    front = ResettingFront(target, set(range(UNREACHABLE_FAILURES)))
    try:
        result = loadgen_run(config=_config(f"http://127.0.0.1:{front.port}", concurrency=1, force_close=True),
                             specs=_specs(40))
    finally:
        front.close()
    s = run_summary(result)
    assert s["stopped_early"].startswith(f"target unreachable: {UNREACHABLE_FAILURES} consecutive connection "
                                         "failures (")
    assert f"127.0.0.1:{front.port})" in s["stopped_early"]
    assert (s["requests"], s["failures"], s["not_sent"]) == (UNREACHABLE_FAILURES, UNREACHABLE_FAILURES,
                                                              40 - UNREACHABLE_FAILURES)
    assert front.accepted == UNREACHABLE_FAILURES  # nothing was sent after the stop


def test_it_never_counts_http_error_answers_as_a_target_gone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CEILING_SIM_FAIL_GENERATE", "1")  # /health answers, every generation is a 500
    base, proc = sim_start(tmp_path / "sim.log")
    try:
        n = 2 * UNREACHABLE_FAILURES + 8
        result = loadgen_run(config=_config(base, concurrency=4), specs=_specs(n))
    finally:
        proc.kill()
        proc.wait(timeout=10)
    s = run_summary(result)
    assert s["stopped_early"] is None and s["not_sent"] == 0
    assert (s["requests"], s["failures"]) == (n, n)
    assert set(result.records.column("http_status").tolist()) == {500}


def test_it_takes_a_limit_of_at_least_one_or_none_for_never() -> None:
    with pytest.raises(ValueError, match="unreachable_failures must be >= 1"):
        _config("http://127.0.0.1:9", concurrency=1, unreachable_failures=0).validate()
    _config("http://127.0.0.1:9", concurrency=1, unreachable_failures=None).validate()
    assert LoadConfig(base_url="http://127.0.0.1:9", api=Api.GENERATE, model="m",
                      concurrency=1).unreachable_failures == UNREACHABLE_FAILURES == 32
