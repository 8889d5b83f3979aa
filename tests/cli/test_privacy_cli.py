"""[privacy] end to end through the CLI: what reaches storage, byte by byte.

The emulator's ``fullip`` zones serve whole client addresses and its ``signed`` zones
URLs with token authentication; v2 records it spoils and bad v1 lines become rejected
lines. After ``ingest`` (v2 and v1 zones) and ``import-v1`` under ``truncate`` and
``hash``, no file under the storage root (Parquet decompressed, the rest as bytes) holds
a whole address or a token, and every request is stored once.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from cdnlake.emulator import Emulator, Faults
from cdnlake.emulator.state import is_bad_record
from tests.conftest import lake_frame, run_cli, start_emulator, write_config

HASH_KEY = "privacy-test-key"
KEY_ENV = "PRIVACY_TEST_KEY"
BAD_RATE = 0.01
V4 = re.compile(rb"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d])")
V6 = re.compile(rb"2001:db8:[0-9a-f:]+")
TOKEN = re.compile(rb"(?i)tk[0-9a-f]{22}|token(?:=|%3d)|expires(?:=|%3d)")


def unsigned(url: str) -> str:
    """A URL of the emulator's ``signed`` zones as docs/privacy.md says it is stored: the
    directory token's segment gone, the query's signing parameters gone, a JWT marked."""
    url = re.sub(r"/(?i:bcdn_token)(?:=|%3D)[^/]*", "", url, count=1)
    url = re.sub(r"[?&;]token=.*$", "", url)
    return re.sub(r"eyJ[\w.-]+", "[token]", url)


def privacy_config(tmp_path: Path, emu: Emulator | None, ip: str, **more: object) -> Path:
    """A config of zones 1234 (v2) and 1235 (v1) with ``[privacy] ip = ip``."""
    if emu is None:
        emu = _NoEmulator()  # type: ignore[assignment]
    path = write_config(tmp_path, emu, zones=[(1234, "v2"), (1235, "v1")])  # type: ignore[arg-type]
    lines = ["[privacy]", f'ip = "{ip}"']
    if ip == "hash":
        lines.append(f'hash_key_env = "{KEY_ENV}"')
    lines += [f"{k} = {v}" for k, v in more.items()]
    text = path.read_text().replace("[[zones]]", "\n".join(lines) + "\n[[zones]]", 1)
    path.write_text(text)
    return path


class _NoEmulator:
    url = "http://127.0.0.1:9"


def cli(config: Path, *args: str) -> str:
    result = run_cli("--config", str(config), *args, env={KEY_ENV: HASH_KEY}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def mac(address: str) -> str:
    packed = ipaddress.ip_address(address).packed
    return hmac.new(HASH_KEY.encode(), packed, hashlib.sha256).hexdigest()


def stored_bytes(root: Path) -> list[tuple[Path, bytes]]:
    """Every file under ``root``: Parquet files decompressed (each value as text), the
    rest as they are."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            values = [str(v) for column in table.columns for v in column.to_pylist()]
            data += "\n".join(values).encode()
        out.append((path, data))
    return out


def leaks(root: Path, addresses: set[str], *, data_only: bool = False) -> list[str]:
    """Whole addresses or tokens found in any stored byte (``data_only``: in the data
    files alone, not in the Delta logs' statistics of files no longer in the tables)."""
    wanted = {a.encode() for a in addresses}
    found = []
    for path, data in stored_bytes(root):
        if data_only and path.suffix != ".parquet":
            continue
        hits = {m for m in V4.findall(data) + V6.findall(data) if m in wanted}
        hits |= set(TOKEN.findall(data))
        if hits:
            found.append(f"{path.relative_to(root)}: {sorted(hits)[:3]}")
    return found


def import_file(tmp_path: Path, ts: datetime) -> tuple[Path, set[str], set[str]]:
    """A v1 file for zone 1234: good lines and bad ones, with whole addresses and signed
    URLs; its addresses and its good request ids."""
    ms = int(ts.timestamp() * 1000)
    good, addresses, lines = set(), set(), []
    for i in range(40):
        ip = f"198.51.{i}.{100 + i}" if i % 2 else f"2001:db8:77:{i:x}:1:2:3:{i + 1:x}"
        rid = f"imp{i:029d}"
        url = f"https://h.example/a{i}?token=tk{i:022x}&x=1&expires=99"
        status = "200" if i % 4 else "abc"  # a quarter of the lines are rejected
        # A rejected line's raw text is scrubbed whole: an address anywhere in it goes.
        agent = "UA" if status == "200" else f"UA 203.0.113.{i + 1}"
        lines.append(f"HIT|{status}|{ms + i}|10|1234|{ip}|-|{url}|DE|{agent}|{rid}|DE")
        addresses |= {ip, f"203.0.113.{i + 1}"}
        if status == "200":
            good.add(rid)
    lines.append(f"garbage 192.0.2.{77} ?token=tk{'f' * 22}")
    addresses.add("192.0.2.77")
    path = tmp_path / "day.log"
    path.write_text("\n".join(lines) + "\n")
    return path, addresses, good


@pytest.mark.parametrize("ip", ["truncate", "hash"])
def test_no_whole_address_or_token_reaches_storage(tmp_path: Path, ip: str) -> None:
    emu = start_emulator(
        "1234:extended:fullip:signed,1235:v1:fullip:signed",
        rpm=1,
        now=None,
        frozen=False,
        faults=Faults(bad_record_rate=BAD_RATE),
    )
    try:
        config = privacy_config(tmp_path, emu, ip)
        cli(config, "ingest")
        now = datetime.now(UTC)
        src, imported, imported_ids = import_file(tmp_path, now - timedelta(hours=1))
        out = cli(config, "import-v1", str(src), "--zone", "1234")
        assert "11 rejected" in out, out
        truth = {
            zone: {
                r.wire.requestId: r.wire
                for r in emu.traffic.records(
                    zone,
                    int((now - timedelta(days=4)).timestamp() * 1000),
                    int(now.timestamp() * 1000) + 1,
                )
            }
            for zone in (1234, 1235)
        }
    finally:
        emu.stop()
    addresses = imported | {w.remoteIp for t in truth.values() for w in t.values()}
    assert not any(a.endswith(".0") or a.endswith("::") for a in addresses)
    root = tmp_path / "data"
    assert leaks(root, addresses) == []
    assert not [p for p, data in stored_bytes(root) if HASH_KEY.encode() in data]  # nor the key

    requests = lake_frame(root)
    rejected = lake_frame(root, "rejected_lines")
    assert rejected.filter(pl.col("source") == "v2").height > 0  # the spoiled records
    assert rejected.height > 11
    # Each request once, none lost: the v2 records the emulator spoiled are the rejects.
    assert requests["request_id"].n_unique() == requests.height
    for zone in (1234, 1235):
        ids = set(requests.filter(pl.col("pull_zone_id") == zone)["request_id"].to_list())
        known = set(truth[zone]) | (imported_ids if zone == 1234 else set())
        assert ids <= known
        if zone == 1234:
            assert imported_ids <= ids
            spoiled = {i for i in truth[zone] if is_bad_record(i, BAD_RATE)}
            assert not ids & spoiled and spoiled & set(truth[zone])
    wire = {rid: w for t in truth.values() for rid, w in t.items()}
    emulated = requests.filter(pl.col("request_id").is_in(list(wire)))
    assert emulated.height > 1000
    for rid, stored, url in emulated.select("request_id", "remote_ip", "url").iter_rows():
        whole = wire[rid].remoteIp
        if ip == "truncate":
            prefix = 24 if "." in whole else 64
            net = ipaddress.ip_network((whole, prefix), strict=False)
            assert stored == str(net.network_address)
        else:
            assert stored == mac(whole)
        assert url == unsigned(wire[rid].url)
    if ip == "hash":  # distinct clients can still be counted
        hashed = emulated["remote_ip"].n_unique()
        assert hashed == len({wire[r].remoteIp for r in emulated["request_id"]})


def test_apply_privacy_rewrites_what_was_stored_before(tmp_path: Path) -> None:
    """keep -> truncate: status says the rows were stored under keep until apply-privacy
    rewrites them; hash cannot become truncate."""
    keep = privacy_config(tmp_path, None, "keep", strip_query="[]")
    src, addresses, good = import_file(tmp_path, datetime.now(UTC) - timedelta(hours=2))
    cli(keep, "import-v1", str(src), "--zone", "1234")
    root = tmp_path / "data"
    assert leaks(root, addresses)  # stored as received
    before = lake_frame(root).sort("request_id")
    assert "privacy:" not in status(keep)  # stored as configured: nothing to say
    zones = {z["zone_id"]: z for z in json.loads(status(keep, "--format", "json"))}
    assert zones[1234]["privacy"] == "ip keep, URLs whole"
    assert zones[1234]["privacy_pending"] is False and zones[1235]["privacy"] is None

    truncate = privacy_config(tmp_path, None, "truncate")
    shown = status(truncate)
    assert "privacy: ip truncate /24 /64, query parameters removed" in shown
    assert "zone 1234 (v2) stored: ip keep, URLs whole" in shown
    assert "maintain --apply-privacy" in shown

    out = cli(truncate, "maintain", "--apply-privacy", "--retention-hours", "0")
    assert "requests zone 1234" in out and "30 row(s) rewritten" in out, out
    assert "rejected_lines: 11 row(s) rewritten" in out, out
    after = lake_frame(root).sort("request_id")
    assert after["request_id"].to_list() == before["request_id"].to_list() == sorted(good)
    assert after.drop("remote_ip", "url").equals(before.drop("remote_ip", "url"))
    assert all(a.endswith(".0") or a.endswith("::") for a in after["remote_ip"])
    assert leaks(root, addresses, data_only=True) == []  # old files vacuumed at once (0 h)
    shown = status(truncate)
    assert "stored:" not in shown and "apply-privacy" not in shown
    again = cli(truncate, "maintain", "--apply-privacy")
    assert "stored under this setting already" in again

    hashed = privacy_config(tmp_path, None, "hash")
    cli(hashed, "maintain", "--apply-privacy")
    assert all(len(a) == 64 for a in lake_frame(root)["remote_ip"])
    day = str(lake_frame(root)["date"][0])
    cli(hashed, "report", "--date", day, "--format", "json", "--out", str(tmp_path / "r"))
    (report,) = (tmp_path / "r").glob("*.json")
    (clients,) = json.loads(report.read_text())["sections"]["clients"]["rows"]
    assert clients["zones"] == "1234" and clients["distinct_clients"] == 30
    # Stored truncated, then hashed: keyed hashes of networks, never "by keyed hash".
    assert clients["addresses_stored"].startswith("ip keyed hashes of /24 (IPv4) and /64")
    assert (
        clients["counted"] == "exact, networks (keyed hashes of truncated addresses), not clients"
    )
    assert "apply-privacy" not in status(hashed)  # nothing it could rewrite
    truncate = privacy_config(tmp_path, None, "truncate")
    refused = run_cli("--config", str(truncate), "maintain", "--apply-privacy")
    assert refused.returncode == 1
    assert "NOT rewritten: addresses stored as hashes cannot be truncated" in refused.stdout


def status(config: Path, *args: str) -> str:
    result = run_cli("--config", str(config), "status", *args, env={KEY_ENV: HASH_KEY})
    return result.stdout
