"""The emulator's permanent log storage: parts, closing rules, faults, statistics."""

from __future__ import annotations

import gzip
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import httpx
import pytest

from cdnlake.emulator import DEFAULT_STORAGE_ZONES, ArchiveLimits, Emulator
from cdnlake.emulator.archive import Archive, ZoneArchive, day_start_ms
from cdnlake.emulator.storage import BAD_LINES
from tests.conftest import KEY, NOW, start_emulator

STORE = DEFAULT_STORAGE_ZONES[0]
MONTH = "pullzone-logs/zone-1234/2026/11/"
MINUTE = 60_000
HTTP = httpx.Client(timeout=60)  # one pool: a client per request costs more than the answer


def listing(emu: Emulator, path: str = MONTH, key: str = STORE.read_only_password) -> list:
    answer = HTTP.get(f"{emu.storage_url}/{STORE.name}/{path}", headers={"AccessKey": key})
    assert answer.status_code == 200, answer.text
    return answer.json()


def fetch(emu: Emulator, name: str, **headers: str) -> httpx.Response:
    return HTTP.get(
        f"{emu.storage_url}/{STORE.name}/{MONTH}{name}",
        headers={"AccessKey": STORE.password, **headers},
    )


def lines_of(emu: Emulator, name: str) -> list[str]:
    return gzip.decompress(fetch(emu, name).content).decode().splitlines()


def advance(emu: Emulator, seconds: float) -> None:
    httpx.post(f"{emu.url}/_emulator/clock", json={"advance_seconds": seconds}).raise_for_status()


def by_name(entries: list) -> dict[str, dict]:
    return {e["ObjectName"]: e for e in entries}


@pytest.fixture(scope="module")
def emu():
    e = start_emulator("1234:archived", rpm=1, archive_days=7, archive_legacy_days=1)
    yield e
    e.stop()


def test_each_request_is_in_one_part_and_the_statistics_agree_beyond_three_days(emu):
    day = date(2026, 11, 15)  # five days back: the logging API no longer has it
    names = [e["ObjectName"] for e in listing(emu) if e["ObjectName"].startswith("15_")]
    per_writer: dict[str, set[int]] = {}
    ids: list[str] = []
    hours: Counter[str] = Counter()
    for name in names:
        for line in lines_of(emu, name):
            fields = line.split("|")
            ts = datetime.fromtimestamp(int(fields[2]) / 1000, tz=UTC)
            assert ts.date() == day
            ids.append(fields[10])
            hours[ts.strftime("%Y-%m-%dT%H:00:00Z")] += 1
            per_writer.setdefault(name.split("_")[1].split("-")[0], set()).add(ts.hour)
    assert len(ids) == len(set(ids)) > 500
    assert set(per_writer) == {"100", "101"} and len(per_writer["100"] & per_writer["101"]) == 24
    stats = httpx.get(
        f"{emu.url}/statistics",
        params={
            "pullZone": "1234",
            "dateFrom": "2026-11-15T00:00:00Z",
            "dateTo": "2026-11-16T00:00:00Z",
            "hourly": "true",
        },
        headers={"AccessKey": KEY},
    ).json()
    assert {k: int(v) for k, v in stats["RequestsServedChart"].items()} == dict(hours)


def test_the_older_scheme_numbers_parts_of_a_day_from_one(emu):
    names = sorted(
        (e["ObjectName"] for e in listing(emu) if e["ObjectName"].startswith("13_")),
        key=lambda n: int(n[3:-5]),
    )
    assert names == [f"13_{n}.gzip" for n in range(1, len(names) + 1)] and len(names) > 1


def test_ranges_are_served_as_the_storage_api_does(emu):
    entry = max(listing(emu), key=lambda e: e["Length"])
    whole = fetch(emu, entry["ObjectName"]).content
    assert len(whole) == entry["Length"]
    part = fetch(emu, entry["ObjectName"], Range="bytes=100-199")
    assert part.status_code == 206 and part.content == whole[100:200]
    assert part.headers["Content-Range"] == f"bytes 100-199/{len(whole)}"
    tail = fetch(emu, entry["ObjectName"], Range="bytes=-10")
    assert tail.status_code == 206 and tail.content == whole[-10:]
    past = fetch(emu, entry["ObjectName"], Range=f"bytes={len(whole)}-")
    assert past.status_code == 416 and past.headers["Content-Range"] == f"bytes */{len(whole)}"


def test_a_wrong_key_is_refused_and_a_missing_file_is_not_found(emu):
    wrong = httpx.get(f"{emu.storage_url}/{STORE.name}/", headers={"AccessKey": KEY})
    assert wrong.status_code == 401 and wrong.json() == {"HttpCode": 401, "Message": "Unauthorized"}
    assert fetch(emu, "15_100-99-00000000.gzip").status_code == 404


def test_an_open_part_grows_by_appending_then_closes():
    emu = start_emulator(
        "1234:archived",
        rpm=1,
        archive_days=0,
        archive_legacy_days=0,
        archive_limits=ArchiveLimits(max_open_seconds=1800),
    )
    try:
        first = by_name(listing(emu))
        newest = max((n for n in first if "_100-" in n), key=lambda n: int(n.split("-")[1]))
        before = fetch(emu, newest).content
        stamp = first[newest]["LastChanged"]
        advance(emu, 600)
        grown = by_name(listing(emu))[newest]
        after = fetch(emu, newest).content
        assert grown["Length"] > len(before) and after.startswith(before)  # appended
        assert grown["LastChanged"] > stamp
        assert gzip.decompress(after).count(b"\n") > gzip.decompress(before).count(b"\n")
        advance(emu, 1800)  # past the part's 30 minutes open
        later = by_name(listing(emu))
        index = int(newest.split("-")[1])
        assert any(n.startswith(f"20_100-{index + 1}-") for n in later)
        closed = later[newest]["Length"]
        advance(emu, 600)
        assert by_name(listing(emu))[newest]["Length"] == closed  # no longer written
    finally:
        emu.stop()


def test_parts_close_at_the_line_limit_and_at_midnight():
    emu = start_emulator(
        "1234:archived", rpm=1, archive_days=1, archive_limits=ArchiveLimits(max_lines=25)
    )
    try:
        entries = listing(emu)
        counts = [len(lines_of(emu, e["ObjectName"])) for e in entries]
        assert max(counts) == 25 and counts.count(25) > len(counts) // 2
        for entry in entries:
            created = datetime.fromisoformat(entry["DateCreated"]).replace(tzinfo=UTC)
            changed = datetime.fromisoformat(entry["LastChanged"]).replace(tzinfo=UTC)
            midnight = datetime.combine(created.date() + timedelta(days=1), datetime.min.time())
            assert changed < midnight.replace(tzinfo=UTC)
    finally:
        emu.stop()


def test_an_hour_without_writes_closes_a_part():
    archive = Archive(1, None, None, ArchiveLimits())  # type: ignore[arg-type]
    zone = ZoneArchive(1234, "zone-1234", STORE.id, [[0, None]])
    day = date(2026, 11, 20)
    t0 = day_start_ms(day) + 10 * MINUTE
    writes = [(t0, "a"), (t0 + MINUTE, "b"), (t0 + 70 * MINUTE, "c")]
    parts = archive._cut(zone, day, 100, writes, t0 + 80 * MINUTE, archive.limits)
    assert [p.lines for p in parts] == [2, 1]
    assert parts[0].closed_ms == t0 + 61 * MINUTE and parts[1].closed_ms is None


def test_damaged_parts_on_demand(emu):
    entries = [e["ObjectName"] for e in listing(emu) if e["ObjectName"].startswith("16_")]
    cut, bad = entries[0], entries[1]
    emu.faults.update({"archive_cut": f"zone-1234/2026/11/{cut}", "archive_bad_lines": f"*/{bad}"})
    try:
        listed = by_name(listing(emu))
        content = fetch(emu, cut).content
        assert listed[cut]["Length"] == len(content)
        with pytest.raises(EOFError):
            gzip.decompress(content)
        assert set(BAD_LINES) <= set(lines_of(emu, bad))
    finally:
        emu.faults.update({"archive_cut": "", "archive_bad_lines": ""})


def test_the_archive_is_the_same_from_the_same_seed(emu):
    again = start_emulator("1234:archived", rpm=1, archive_days=7, archive_legacy_days=1)
    try:
        first = {(e["ObjectName"], e["Length"], e["Checksum"]) for e in listing(emu)}
        assert first == {(e["ObjectName"], e["Length"], e["Checksum"]) for e in listing(again)}
    finally:
        again.stop()


def test_permanent_storage_is_switched_through_the_pull_zone(emu):
    headers = {"AccessKey": KEY}
    refused = httpx.post(
        f"{emu.url}/pullzone/1234",
        json={"LoggingSaveToStorage": True, "LoggingStorageZoneId": 99},
        headers=headers,
    )
    assert refused.status_code == 400 and refused.json()["Field"] == "LoggingStorageZoneId"
    zone = httpx.get(f"{emu.url}/pullzone/1234", headers=headers).json()
    assert zone["LoggingSaveToStorage"] is True and zone["LoggingStorageZoneId"] == STORE.id
    listed = httpx.get(f"{emu.url}/storagezone", headers=headers).json()
    assert listed["TotalItems"] == 1 and listed["Items"][0]["Name"] == STORE.name
    assert httpx.get(f"{emu.url}/storagezone/8001", headers={}).status_code == 401
    assert NOW.date() == date(2026, 11, 20)


def test_the_closing_rules_change_on_demand():
    emu = start_emulator("1234:archived", rpm=1, archive_days=0, archive_legacy_days=0)
    control = f"{emu.url}/_emulator/archive"
    try:
        answer = httpx.post(control, json={"max_lines": 10})
        assert answer.status_code == 200 and answer.json()["limits"]["max_lines"] == 10
        assert answer.json()["zones"]["1234"]["enabled"] is True
        assert max(len(lines_of(emu, e["ObjectName"])) for e in listing(emu)[:20]) == 10
        refused = httpx.post(control, json={"max_lines": 0})
        assert refused.status_code == 400 and "max_lines" in refused.text
        assert httpx.post(control, json={"nonsense": 1}).status_code == 400
    finally:
        emu.stop()
