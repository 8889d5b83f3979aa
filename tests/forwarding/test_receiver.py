"""The syslog receiver over real sockets on 127.0.0.1: TCP (both framings), UDP and TLS,
each request stored once with the logging API's passes, and hostile input rejected alone."""

from __future__ import annotations

import datetime as dt
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import polars as pl
import pytest

from cdnlake.forwarding import receiver as receiver_module
from cdnlake.lake.log.progress import from_ms
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.writer import ZoneWriter
from tests.conftest import NOW, ingest_all, lake_frame, lake_ids, lake_of
from tests.forwarding.helpers import (
    forwarding_config,
    octets,
    send_tcp,
    send_udp,
    started,
    syslog,
    until,
    v1_lines,
)
from tests.sessions import mark_of, session_of


def forwarded(config, zone: int) -> pl.DataFrame:
    frame = lake_frame(config)
    return frame.filter((pl.col("pull_zone_id") == zone) & (pl.col("source") == "forwarded"))


def watermark(config, zone: int) -> dt.datetime | None:
    return from_ms(mark_of(ZoneWriter(session_of(lake_of(config)), REQUESTS, zone)))


def test_tcp_frames_land_once_and_the_next_pass_does_not_double_them(tmp_path, emulator):
    config = forwarding_config(tmp_path, emulator)
    lines = v1_lines(emulator, 1234, NOW - dt.timedelta(minutes=30), 10)
    assert len(lines) > 20
    half = len(lines) // 2
    receiver = started(config)
    try:
        assert receiver.address is not None
        # One connection octet counted, one newline framed, one that repeats some lines.
        send_tcp(receiver.address, b"".join(octets(syslog(line)) for line in lines[:half]))
        send_tcp(receiver.address, b"".join(syslog(line) + b"\n" for line in lines[half:]))
        send_tcp(receiver.address, b"".join(syslog(line) + b"\r\n" for line in lines[:5]))
        until(lambda: receiver.counts.rows + receiver.counts.duplicates == len(lines) + 5, receiver)
    finally:
        assert receiver.stop()
    assert receiver.counts.rows == len(lines)
    assert receiver.counts.duplicates == 5
    rows = forwarded(config, 1234)
    assert sorted(rows["request_id"]) == sorted(line.split("|")[10] for line in lines)
    assert watermark(config, 1234) is None  # forwarding never moves a watermark

    results = ingest_all(config, emulator)  # the logging API's pass: the ledger
    assert all(r.ok for r in results), [r.error for r in results]
    ids = lake_ids(config, 1234)
    assert len(ids) == len(set(ids)), "a request stored twice"
    assert set(rows["request_id"]) <= set(ids)
    assert forwarded(config, 1234).height == len(lines)  # the pass dropped its repeats
    assert watermark(config, 1234) is not None  # the pass moved it


def test_udp_datagrams_land_once(tmp_path, emulator):
    config = forwarding_config(tmp_path, emulator, "udp")
    lines = v1_lines(emulator, 1235, NOW - dt.timedelta(minutes=20), 5)
    receiver = started(config)
    try:
        assert receiver.address is not None
        send_udp(receiver.address, [syslog(line) for line in lines])
        until(lambda: receiver.counts.rows == len(lines))
    finally:
        assert receiver.stop()
    assert sorted(forwarded(config, 1235)["request_id"]) == sorted(
        line.split("|")[10] for line in lines
    )


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made here."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor the openssl program is here")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        return cert, key
    import ipaddress

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(private, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert, key


def test_tls_frames_land_once(tmp_path, emulator):
    cert, key = self_signed(tmp_path)
    config = forwarding_config(tmp_path, emulator, "tls", tls_cert=f'"{cert}"', tls_key=f'"{key}"')
    lines = v1_lines(emulator, 1234, NOW - dt.timedelta(minutes=20), 5)
    client = ssl.create_default_context(cafile=str(cert))
    receiver = started(config)
    try:
        assert receiver.address is not None
        send_tcp(receiver.address, b"".join(octets(syslog(line)) for line in lines), client)
        until(lambda: receiver.counts.rows == len(lines))
        # A client speaking plain TCP to the TLS port is dropped, and nothing is taken.
        send_tcp(receiver.address, syslog(lines[0]) + b"\n")
    finally:
        assert receiver.stop()
    assert forwarded(config, 1234).height == len(lines)
    assert receiver.counts.messages == len(lines)
    assert receiver.counts.dropped == {"tls handshake failed": 1}


def test_hostile_input_is_rejected_alone_and_the_receiver_keeps_serving(tmp_path, emulator):
    config = forwarding_config(tmp_path, emulator)
    good = v1_lines(emulator, 1234, NOW - dt.timedelta(minutes=20), 5)
    fields = good[0].split("|")
    bad_status = "|".join([*fields[:1], "999", *fields[2:]])
    unknown_zone = "|".join([*fields[:4], "777", *fields[5:]])
    receiver = started(config)
    try:
        address = receiver.address
        assert address is not None
        stream = b"".join(
            [
                b"GET / HTTP/1.1\r\n",  # not syslog
                syslog("hello there") + b"\n",  # syslog, but not a log line
                octets(syslog(bad_status)),  # a log line of a configured zone that is wrong
                syslog(unknown_zone) + b"\n",  # a zone this lake does not hold
                syslog(good[1]) + b"\n",  # and the connection goes on
            ]
        )
        send_tcp(address, stream)
        until(lambda: receiver.counts.rows == 1 and receiver.counts.rejected == 1)
        # An oversized frame ends its connection (the receiver closes it)...
        assert send_tcp(address, syslog(good[2]) + b"\n" + b"99999 " + b"x" * 70_000) == b""
        # ...and the next connection is served.
        send_tcp(address, syslog(good[3]) + b"\n")
        until(lambda: receiver.counts.rows == 3)
    finally:
        assert receiver.stop()
    assert receiver.counts.dropped == {
        "not syslog": 1,
        "not a log line": 1,
        "unknown zone": 1,
        "oversized frame": 1,
    }
    assert sorted(forwarded(config, 1234)["request_id"]) == sorted(
        line.split("|")[10] for line in good[1:4]
    )
    rejected = lake_frame(config, "rejected_lines")
    assert rejected.select("zone", "source", "reason").rows() == [
        (1234, "forwarded", "field 2: bad status code '999'")
    ]
    assert "777" not in set(lake_frame(config)["pull_zone_id"].cast(pl.String))


def test_a_sender_outside_allow_is_refused(tmp_path, emulator):
    config = forwarding_config(tmp_path, emulator, allow='["10.0.0.0/8"]')
    line = v1_lines(emulator, 1234, NOW - dt.timedelta(minutes=20), 5)[0]
    receiver = started(config)
    try:
        assert receiver.address is not None
        assert send_tcp(receiver.address, syslog(line) + b"\n") == b""  # closed unread
        until(lambda: receiver.counts.dropped["sender not allowed"] == 1)
    finally:
        assert receiver.stop()
    assert receiver.counts.messages == 0
    assert forwarded(config, 1234).height == 0


def test_a_stalled_sender_is_closed_and_others_are_served(tmp_path, emulator, monkeypatch):
    monkeypatch.setattr(receiver_module, "IDLE_SECONDS", 0.5)
    config = forwarding_config(tmp_path, emulator)
    lines = v1_lines(emulator, 1234, NOW - dt.timedelta(minutes=20), 5)
    receiver = started(config)
    try:
        assert receiver.address is not None
        with socket.create_connection(receiver.address, timeout=30) as stalled:
            stalled.sendall(syslog(lines[0])[:40])  # half a frame, then nothing
            assert stalled.recv(1) == b""  # the receiver closed it
        send_tcp(receiver.address, syslog(lines[1]) + b"\n")
        until(lambda: receiver.counts.rows == 1, receiver)
    finally:
        assert receiver.stop()
    assert receiver.counts.messages == 1
