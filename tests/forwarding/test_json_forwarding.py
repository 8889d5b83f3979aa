"""JSON forwarding over real sockets: messages of both formats mixed on one connection, and
the emulator pushing a zone as JSON, then plain after `set-forwarding --format plain`;
each request stored once, as the logging API serves it."""

from __future__ import annotations

import datetime as dt
import logging

import msgspec
import polars as pl

from cdnlake.client.logging_wire import V2Query
from cdnlake.ingest.decode import decode_v2_batch
from cdnlake.ingest.normalize import normalize_v2
from cdnlake.lake.log.schema import REQUEST_SCHEMA, polars_schema
from tests.conftest import (
    NOW,
    lake_frame,
    lake_ids,
    logging_client,
    run_cli,
    start_emulator,
)
from tests.forwarding.helpers import forwarding_config, octets, send_tcp, started, syslog, until

ROWS = polars_schema(REQUEST_SCHEMA)
NOT_IN_A_LINE = ["ja4_fingerprint", "asn", "asn_organization"]  # JSON has them, v1 lines not


def records(emu, zone: int, start: dt.datetime, end: dt.datetime) -> list:
    return emu.traffic.records(zone, int(start.timestamp() * 1000), int(end.timestamp() * 1000))


def as_json(record, **fields: object) -> str:
    return msgspec.json.encode(msgspec.structs.replace(record.wire, **fields)).decode()


def served(config, zone: int, ids: set[str], start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """What the logging API v2 serves of ``ids``, as the lake's rows (no source)."""
    query = V2Query(from_=start, to=end, limit=10_000, order="asc")
    frames = [
        normalize_v2(batch.frame, zone)[0]
        for batch in logging_client(config).iter_v2(zone, query, decode_v2_batch)
    ]
    rows = pl.concat(frames).filter(pl.col("request_id").is_in(sorted(ids)))
    return rows.cast(ROWS).drop("source").sort("request_id")  # type: ignore[arg-type]


def stored(config, zone: int, ids: set[str]) -> pl.DataFrame:
    frame = lake_frame(config).filter(
        (pl.col("pull_zone_id") == zone) & pl.col("request_id").is_in(sorted(ids))
    )
    return frame.select(list(ROWS)).cast(ROWS).drop("source").sort("request_id")  # type: ignore[arg-type]


def test_plain_and_json_messages_mix_on_one_connection(tmp_path, emulator, caplog):
    caplog.set_level(logging.DEBUG, logger="cdnlake")
    config = forwarding_config(tmp_path, emulator)
    recs = records(emulator, 1234, NOW - dt.timedelta(minutes=30), NOW - dt.timedelta(minutes=20))
    assert len(recs) > 20
    half = len(recs) // 2
    first = recs[0]
    hostile = [
        as_json(first, statusCode="abc"),  # a field of the wrong type (wire keeps it)
        '{"pullZoneId":1234,"authorizationHeader":"Bearer leaked-secret", cut',  # not JSON
        as_json(first, requestId=None),
        as_json(first, timestamp="2099-01-01T00:00:00Z", requestId="from-the-future"),
    ]
    stream = [
        *(octets(syslog(r.v1_line(extended=True))) for r in recs[:half]),  # plain
        *(syslog(as_json(r)) + b"\n" for r in recs[half:]),  # then JSON: the zone switched
        *(octets(syslog(as_json(r))) for r in recs[:3]),  # repeats, in the other format
        *(syslog(text) + b"\n" for text in hostile),
        syslog(as_json(first, pullZoneId=777)) + b"\n",  # a zone this lake does not hold
        syslog(as_json(first, pullZoneId=None)) + b"\n",  # no zone at all
    ]
    receiver = started(config)
    try:
        assert receiver.address is not None
        send_tcp(receiver.address, b"".join(stream))
        until(
            lambda: (
                receiver.counts.rows + receiver.counts.duplicates == len(recs) + 3
                and receiver.counts.rejected == len(hostile)
            ),
            receiver,
        )
    finally:
        assert receiver.stop()
    assert receiver.counts.rows == len(recs)
    assert receiver.counts.dropped == {"unknown zone": 1, "JSON without a pull zone": 1}
    ids = lake_ids(config, 1234)
    assert sorted(ids) == sorted(r.wire.requestId for r in recs)  # each once
    assert set(lake_frame(config)["source"]) == {"forwarded"}
    # Rows from plain lines and from JSON objects look alike.
    frame = lake_frame(config)
    assert frame.filter(pl.col("ja4_fingerprint").is_not_null()).height == len(recs) - half
    rejected = lake_frame(config, "rejected_lines").sort("line_number")
    assert rejected.select("zone", "source", "kind").rows() == [
        (1234, "forwarded", kind)
        for kind in ("wrong type", "bad JSON", "missing request id", "future timestamp")
    ]
    assert not rejected["raw_line"].str.contains("leaked-secret").any()
    assert "777" not in set(lake_frame(config)["pull_zone_id"].cast(pl.String))
    logged = caplog.text
    assert first.wire.url not in logged and first.wire.remoteIp not in logged


def test_the_emulator_forwards_json_then_plain_as_set_forwarding_says(tmp_path):
    emu = start_emulator("1234:extended", rpm=600, now=None, frozen=False)
    try:
        emu.management.forwarder.udp_loss = 0.0
        config = forwarding_config(tmp_path, emu, "tcp", zones=[(1234, "v2")])
        cli = ["--config", str(config.path), "api", "pullzone", "set-forwarding", "--zone", "1234"]
        began = emu.clock.now()
        receiver = started(config)
        try:
            assert receiver.address is not None
            host, port = receiver.address
            to = ["--host", host, "--port", str(port), "--protocol", "tcp"]
            r = run_cli(*cli, *to, "--format", "json")
            assert r.returncode == 0, r.stderr
            assert '"LogForwardingFormat": 1' in r.stdout
            pushed = emu.management.forwarder.pushed[1234]
            until(lambda: pushed.sent >= 20 and receiver.counts.rows >= 20, receiver)
            as_json = set(pushed.request_ids)  # pushed before the switch: JSON for sure
            r = run_cli(*cli, *to, "--format", "plain")  # mid-stream: nothing is lost
            assert r.returncode == 0, r.stderr
            assert '"LogForwardingFormat": 0' in r.stdout
            switched = len(pushed.request_ids)
            until(lambda: pushed.sent >= switched + 20, receiver)
            assert run_cli(*cli, "--disable").returncode == 0
            ended = emu.clock.now()
            until(lambda: receiver.counts.rows == pushed.sent, receiver)
        finally:
            assert receiver.stop()
        as_plain = set(pushed.request_ids[switched:])
        sent = set(pushed.request_ids)
        assert len(sent) == pushed.sent and pushed.lost == 0
        ids = lake_ids(config, 1234)
        assert sorted(ids) == sorted(sent), "a request lost or stored twice"
        # Every request between the first forwarded and the last was forwarded: the switch
        # of format lost none.
        ts = {r.wire.requestId: r.ts_ms for r in records(emu, 1234, began, ended)}
        first, last = min(ts[i] for i in sent), max(ts[i] for i in sent)
        assert {i for i, ms in ts.items() if first <= ms <= last} == sent
        # The rows are what the logging API serves for the same requests.
        emu.clock.advance(400)  # every request of those minutes served by the API
        start, end = began - dt.timedelta(minutes=1), emu.clock.now()
        assert stored(config, 1234, as_json).equals(served(config, 1234, as_json, start, end))
        assert (
            stored(config, 1234, as_plain)
            .drop(NOT_IN_A_LINE)
            .equals(served(config, 1234, as_plain, start, end).drop(NOT_IN_A_LINE))
        )
        assert receiver.counts.rejected == 0
    finally:
        emu.stop()


def test_set_forwarding_format_is_checked(tmp_path, emulator):
    config = forwarding_config(tmp_path, emulator)
    cli = ["--config", str(config.path), "api", "pullzone", "set-forwarding", "--zone", "1234"]
    r = run_cli(*cli, "--disable", "--format", "json")
    assert r.returncode == 2 and "--disable takes no --format" in r.stderr
    r = run_cli(*cli, "--host", "h", "--port", "514", "--protocol", "udp", "--format", "xml")
    assert r.returncode == 2 and "--format" in r.stderr
    r = run_cli(*cli, "--host", "127.0.0.1", "--port", "514", "--protocol", "udp")
    assert r.returncode == 0, r.stderr
    assert '"LogForwardingFormat": 0' in r.stdout  # plain unless told
    assert emulator.management.forwarder._targets[1234].log_format == 0
    r = run_cli(*cli, "--disable")
    assert r.returncode == 0, r.stderr


def test_set_forwarding_without_format_keeps_the_zones_format(tmp_path, emulator):
    """Moving a zone's forwarding to another receiver must not switch JSON back to plain."""
    config = forwarding_config(tmp_path, emulator)
    cli = ["--config", str(config.path), "api", "pullzone", "set-forwarding", "--zone", "1234"]
    to = ["--host", "127.0.0.1", "--protocol", "udp"]
    r = run_cli(*cli, *to, "--port", "514", "--format", "json")
    assert r.returncode == 0, r.stderr
    r = run_cli(*cli, *to, "--port", "515")
    assert r.returncode == 0, r.stderr
    assert '"LogForwardingFormat": 1' in r.stdout and '"LogForwardingPort": 515' in r.stdout
    assert emulator.management.forwarder._targets[1234].log_format == 1
    assert run_cli(*cli, "--disable").returncode == 0
