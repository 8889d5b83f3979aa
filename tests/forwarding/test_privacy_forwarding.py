"""[privacy] on the forwarding path: forwarded rows and rejected lines are stored treated."""

from __future__ import annotations

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
    receiver = started(config)
    try:
        assert receiver.address is not None
        send_tcp(receiver.address, b"".join(syslog(line) + b"\n" for line in [*lines, bad]))
        until(lambda: receiver.counts.rows == 20 and receiver.counts.rejected == 1, receiver)
    finally:
        assert receiver.stop()
    rows = lake_frame(config).filter(pl.col("source") == "forwarded")
    assert rows.height == 20 and rows["request_id"].n_unique() == 20
    assert set(rows["remote_ip"]) == {"198.51.0.0"}
    assert not rows["url"].str.contains("SECRET").any()
    assert rows["url"].str.contains("?n=", literal=True).all()
    (raw,) = lake_frame(config, "rejected_lines")["raw_line"]
    assert "198.51.0.0" in raw and "198.51.100.99" not in raw and "SECRET" not in raw
