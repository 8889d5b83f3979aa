"""End to end: `cdnlake api pullzone set-forwarding` makes the emulator push a zone's
requests to the receiver as they happen (TCP, TLS, UDP with losses); the next logging API
pass fills what forwarding lost, and each request is stored once."""

from __future__ import annotations

import contextlib
import socket
from argparse import ArgumentParser
from datetime import timedelta

import polars as pl
import pytest

from cdnlake.cli.emulator_cmd import add_arguments, build_config
from cdnlake.emulator.forwarding import UDP, Delay, Target
from cdnlake.errors import UsageError
from cdnlake.lake.log.progress import to_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.writer import ZoneWriter
from tests.conftest import (
    ingest_all,
    lake_frame,
    lake_ids,
    lake_of,
    run_cli,
    start_emulator,
    truth_ids,
)
from tests.forwarding.helpers import forwarding_config, started, until
from tests.forwarding.test_receiver import self_signed
from tests.sessions import mark_of, session_of

PUSHED = 40  # requests to see forwarded (the zone serves ten a second)


@pytest.mark.parametrize("protocol", ["tcp", "tls", "udp"])
def test_forwarded_by_the_emulator_then_filled_by_a_pass(tmp_path, protocol):
    emu = start_emulator("1234:extended", rpm=600, now=None, frozen=False)
    try:
        emu.management.forwarder.udp_loss = 0.2  # the provider's best effort, made visible
        tls = {}
        if protocol == "tls":
            cert, key = self_signed(tmp_path)
            tls = {"tls_cert": f'"{cert}"', "tls_key": f'"{key}"'}
        config = forwarding_config(
            tmp_path,
            emu,
            protocol,
            zones=[(1234, "v2")],
            ingest={"overlap_seconds": 30, "lag_seconds": 60},
            **tls,
        )
        cli = ["--config", str(config.path), "api", "pullzone", "set-forwarding", "--zone", "1234"]
        began = emu.clock.now()
        # The lake's last pass ended a minute ago: the next one reads from there.
        writer = ZoneWriter(session_of(lake_of(config)), REQUESTS, 1234)
        writer.commit(writer.empty(), {"": to_ms(began - timedelta(minutes=1))})
        receiver = started(config)
        try:
            assert receiver.address is not None
            host, port = receiver.address
            r = run_cli(*cli, "--host", host, "--port", str(port), "--protocol", protocol)
            assert r.returncode == 0, r.stderr
            assert '"LogForwardingEnabled": true' in r.stdout
            pushed = emu.management.forwarder.pushed[1234]
            until(lambda: pushed.sent >= PUSHED and receiver.counts.rows >= PUSHED, receiver)
            r = run_cli(*cli, "--disable")
            assert r.returncode == 0, r.stderr
            ended = emu.clock.now()
            until(lambda: receiver.counts.rows == pushed.sent, receiver)
        finally:
            assert receiver.stop()
        sent = set(pushed.request_ids)
        assert len(sent) == pushed.sent
        if protocol == "udp":
            assert pushed.lost > 0
        else:
            assert pushed.lost == 0
        forwarded = lake_frame(config).filter(pl.col("source") == "forwarded")
        assert set(forwarded["request_id"]) == sent
        assert mark_of(writer, "") == to_ms(began - timedelta(minutes=1))  # not moved

        emu.clock.advance(400)  # every request of the forwarding minutes now in the API
        results = ingest_all(config, emu)
        assert all(r.ok for r in results), [r.error for r in results]
        ids = lake_ids(config, 1234)
        assert len(ids) == len(set(ids)), "a request stored twice"
        truth = truth_ids(emu, 1234, began, ended)
        assert truth <= set(ids)  # what forwarding lost, the pass filled
        assert sent <= truth
        assert lake_frame(config).filter(pl.col("source") == "forwarded").height == len(sent)
    finally:
        emu.stop()


def test_set_forwarding_refuses_incomplete_or_contradictory_arguments(tmp_path, emulator):
    config = forwarding_config(tmp_path, emulator)
    cli = ["--config", str(config.path), "api", "pullzone", "set-forwarding", "--zone", "1234"]
    r = run_cli(*cli, "--host", "127.0.0.1")
    assert r.returncode == 2
    assert "set-forwarding: --port, --protocol needed (or --disable)" in r.stderr
    r = run_cli(*cli, "--disable", "--port", "5")
    assert r.returncode == 2 and "--disable takes no --port" in r.stderr
    r = run_cli(*cli, "--host", "h", "--port", "70000", "--protocol", "udp")
    assert r.returncode == 2 and "LogForwardingPort" in r.stderr
    r = run_cli("--config", str(config.path), "api", "pullzone", "set-forwarding", "--zone",
                "999", "--disable")  # fmt: skip
    assert r.returncode == 1 and "999" in r.stderr


def test_the_emulator_pushes_each_request_within_its_forward_delay():
    emu = start_emulator("1234:extended", rpm=600)  # a frozen clock: time moves when told
    try:
        forwarder = emu.management.forwarder
        forwarder.delay = Delay(10, 30)
        forwarder.udp_loss = 0.0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
            sink.bind(("127.0.0.1", 0))
            sink.setblocking(False)
            start = emu.clock.now_ms()
            forwarder.set(1234, Target("127.0.0.1", sink.getsockname()[1], UDP))
            pushed = forwarder.pushed[1234]
            late_ones = 0
            for _ in range(12):
                emu.clock.advance(5)
                now = emu.clock.now_ms()
                records = emu.traffic.records(1234, start, now)
                due = {r.wire.requestId for r in records if r.ts_ms + 30_000 <= now}
                until(lambda due=due: due <= set(pushed.request_ids))  # type: ignore[misc]
                early = {r.wire.requestId for r in records if r.ts_ms + 10_000 > now}
                assert not early & set(pushed.request_ids), "pushed before its delay"
                late_ones += len({r.wire.requestId for r in records if r.ts_ms + 20_000 <= now}
                                 - set(pushed.request_ids))  # fmt: skip
                with contextlib.suppress(BlockingIOError):
                    while sink.recv(65536):
                        pass
            assert late_ones > 0  # delays spread over the range, not all at its low end
            assert pushed.sent > 300 and pushed.lost == 0
    finally:
        emu.stop()


def test_forward_delay_flag():
    parser = ArgumentParser()
    add_arguments(parser)
    assert build_config(parser.parse_args([])).forward_delay == Delay(0, 0)
    config = build_config(parser.parse_args(["--forward-delay", "10-30"]))
    assert config.forward_delay == Delay(10, 30)
    assert build_config(parser.parse_args(["--forward-delay", "5"])).forward_delay == Delay(5, 5)
    for bad in ("30-10", "soon", "-1", "1-"):
        with pytest.raises(UsageError, match="--forward-delay"):
            build_config(parser.parse_args(["--forward-delay", bad]))
    r = run_cli("emulator", "--forward-delay", "ten")
    assert r.returncode == 2
    assert "--forward-delay: expected SECONDS or LOW-HIGH" in r.stderr
