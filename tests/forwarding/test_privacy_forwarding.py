"""[privacy] on the forwarding path: forwarded rows and rejected lines are stored treated."""

from __future__ import annotations

from typing import Any

import msgspec
import polars as pl

from cdnlake.config import load_config
from tests.conftest import KEY, lake_frame
from tests.forwarding.helpers import forwarding_config, send_tcp, started, synthetic, syslog, until


def test_forwarded_lines_are_stored_truncated_without_tokens(tmp_path, emulator):
    config = forwarding_config(tmp_path, emulator)
    assert config.path is not None
    text = config.path.read_text()
    privacy = '[privacy]\nip = "truncate"\nipv4_prefix = 16\n'
    config.path.write_text(text.replace("[[zones]]", privacy + "[[zones]]", 1))
    config = load_config(config.path, env={"CDNLAKE_ACCESS_KEY": KEY})
    lines = [synthetic(i).replace("/p/", "/p/?token=SECRET&n=") for i in range(1, 21)]
    fields = synthetic(99).split("|")
    bad = "|".join([fields[0], "999", *fields[2:7], "https://h/x?token=SECRET", *fields[8:]])
    # The provider's JSON format: a v2 record, good and bad (its status code out of range).
    (one, two) = emulator.traffic.records(1234, START, START + 600_000)[:2]
    messages = [
        as_json(one, remoteIp="198.51.100.201", url=one.wire.url + "?n=1&token=SECRET"),
        as_json(two, remoteIp="198.51.100.202", url="https://h/?token=SECRET", statusCode=999),
    ]
    receiver = started(config)
    try:
        assert receiver.address is not None
        payload = [*lines, bad, *messages]
        send_tcp(receiver.address, b"".join(syslog(line) + b"\n" for line in payload))
        until(lambda: receiver.counts.rows == 21 and receiver.counts.rejected == 2, receiver)
    finally:
        assert receiver.stop()
    rows = lake_frame(config).filter(pl.col("source") == "forwarded")
    assert rows.height == 21 and rows["request_id"].n_unique() == 21
    assert set(rows["remote_ip"]) == {"198.51.0.0"}
    assert not rows["url"].str.contains("SECRET").any()
    assert rows["url"].str.contains("?n=", literal=True).all()
    raws = lake_frame(config, "rejected_lines")["raw_line"].to_list()
    assert len(raws) == 2 and all("198.51.0.0" in raw for raw in raws)
    for secret in ("198.51.100.99", "198.51.100.202", "SECRET"):
        assert not any(secret in raw for raw in raws)


START = 1_795_172_400_000 - 3_600_000


def as_json(record: Any, **fields: object) -> str:
    return msgspec.json.encode(msgspec.structs.replace(record.wire, **fields)).decode()
