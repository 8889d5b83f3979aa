"""The backfill's own logic against an in-process fake of the storage zone (the HTTP tests
against the emulator are in tests/cli/test_backfill_cli.py): naming schemes, the closing
rule, each part once, a crash between a part's rows and its ledger row."""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl

from cdnlake.config import build_config
from cdnlake.ingest.archive_parts import Part, closed_parts, parse_name
from cdnlake.ingest.archive_store import Entry
from cdnlake.ingest.backfill import Backfill
from tests.conftest import lake_frame, lake_ids
from tests.sessions import session_for

ZONE = 1234
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
GOOD = "HIT|200|{ts}|412|{zone}|163.172.53.0|-|https://cdn.example.net/a|WA|UA|{rid}|DE"


def lines(day: date, tag: str, n: int, zone: int = ZONE) -> list[str]:
    start = int(datetime(day.year, day.month, day.day, 1, tzinfo=UTC).timestamp() * 1000)
    return [GOOD.format(ts=start + i * 1000, zone=zone, rid=f"{tag}{i:024d}") for i in range(n)]


@dataclass
class Stored:
    data: bytes
    last_changed: datetime


class FakeStore:
    """A storage zone in memory: paths to bytes, listed as the Edge Storage API does."""

    def __init__(self) -> None:
        self.files: dict[str, Stored] = {}
        self.fetched: list[str] = []

    def put(
        self, path: str, text: list[str], changed: datetime, *, raw: bytes | None = None
    ) -> None:
        data = raw if raw is not None else gzip.compress(("\n".join(text) + "\n").encode())
        self.files[path] = Stored(data, changed)

    def list_folder(self, path: str) -> list[Entry]:
        out: dict[str, Entry] = {}
        for name, stored in self.files.items():
            if not name.startswith(path):
                continue
            rest = name[len(path) :]
            head, slash, _ = rest.partition("/")
            checksum = hashlib.sha256(stored.data).hexdigest().upper()
            out[head] = Entry(head, bool(slash), len(stored.data), stored.last_changed, checksum)
        return list(out.values())

    def fetch(self, path: str, dest: Path, *, size: int, checksum: str) -> None:
        self.fetched.append(path)
        dest.write_bytes(self.files[path].data)


def make_config(tmp_path: Path):
    raw = {
        "storage": {"root": str(tmp_path / "data")},
        "zones": [
            {
                "id": ZONE,
                "archive": {"storage_zone": "logs", "folder": "www", "password_env": "ARCHIVE_PW"},
            }
        ],
    }
    return build_config(raw, base_dir=tmp_path, env={"ARCHIVE_PW": "pw"})


def backfill(config, store, now=NOW, first=None, last=None):
    with session_for(config) as session:
        job = Backfill(config, session, store, config.zones[0], clock=lambda: now)
        listing = job.listing(first, last)
        return listing, job.run(listing)


def test_names_of_both_schemes():
    assert parse_name(2026, 11, "07_1.gzip") == (date(2026, 11, 7), "", 1)
    assert parse_name(2026, 11, "07_100-0-a1b2c3d4.gzip") == (date(2026, 11, 7), "100", 0)
    assert parse_name(2026, 11, "31_1.gzip") is None  # November has 30 days
    assert parse_name(2026, 11, "notes.txt") is None


def test_the_closing_rule():
    day = date(2026, 11, 20)

    def part(name: str, changed: datetime) -> Part:
        d, writer, index = parse_name(2026, 11, name)  # type: ignore[misc]
        return Part(f"2026/11/{name}", d, 10, "", changed, writer, index)

    parts = [
        part("20_100-0-aaaaaaaa.gzip", NOW - timedelta(minutes=10)),  # a later one: closed
        part("20_100-1-bbbbbbbb.gzip", NOW - timedelta(minutes=2)),  # the writer's last: open
        part("20_200-0-cccccccc.gzip", NOW - timedelta(minutes=70)),  # idle over an hour
        # a late record of the 19th after midnight: a new part of that day, open
        part("19_1.gzip", datetime(2026, 11, 20, 11, 30, tzinfo=UTC)),
    ]
    closed, still_open = closed_parts(parts, NOW)
    assert [p.name for p in still_open] == ["20_100-1-bbbbbbbb.gzip", "19_1.gzip"]
    assert len(closed) == 2 and all(p.day == day for p in closed)


def test_each_part_once_and_open_ones_left_for_later(tmp_path):
    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 50), old)
    store.put("pullzone-logs/www/2026/11/01_2.gzip", lines(date(2026, 11, 1), "b", 20), old)
    store.put(
        "pullzone-logs/www/2026/11/20_100-0-0a0b0c0d.gzip",
        lines(date(2026, 11, 20), "c", 30),
        NOW - timedelta(minutes=1),
    )
    listing, result = backfill(config, store)
    assert [p.name for p in listing.open] == ["20_100-0-0a0b0c0d.gzip"]
    assert result.ok and len(result.parts) == 2 and result.rows == 70
    assert len(lake_ids(config, ZONE)) == 70

    # The open part closes (an hour without writes); only it is read on the next run.
    store.fetched.clear()
    listing, result = backfill(config, store, now=NOW + timedelta(hours=2))
    assert store.fetched == ["pullzone-logs/www/2026/11/20_100-0-0a0b0c0d.gzip"]
    assert result.ok and result.rows == 30 and len(listing.done) == 2
    ids = lake_ids(config, ZONE)
    assert len(ids) == len(set(ids)) == 100
    parts = lake_frame(config, "archive_parts").sort("path")
    assert parts["state"].to_list() == ["imported"] * 3
    assert parts["rows"].to_list() == [50, 20, 30]


def test_a_crash_between_a_parts_rows_and_its_ledger_row(tmp_path, monkeypatch):
    """``archive_parts`` says a part is done, written after its rows: that row lost, the
    part costs one download again, and its rows, all in the lake, are dropped as
    repeats."""
    from cdnlake.lake.zone.bookkeeping import Bookkeeping

    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 10), old)
    real = Bookkeeping.record_archive_parts

    def lost(self, zone_id, parts, *, listing):
        if not listing:
            raise KeyboardInterrupt  # the process dies right after the part's commit
        real(self, zone_id, parts, listing=listing)

    monkeypatch.setattr(Bookkeeping, "record_archive_parts", lost)
    try:
        backfill(config, store)
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(Bookkeeping, "record_archive_parts", real)
    assert len(lake_ids(config, ZONE)) == 10
    store.fetched.clear()
    listing, result = backfill(config, store)
    assert store.fetched == ["pullzone-logs/www/2026/11/01_1.gzip"] and len(listing.todo) == 1
    assert result.ok and result.rows == 0 and result.parts[0].result.duplicates == 10
    ids = lake_ids(config, ZONE)
    assert len(ids) == len(set(ids)) == 10
    parts = lake_frame(config, "archive_parts")
    assert parts["state"].to_list() == ["imported"]
    store.fetched.clear()
    listing, result = backfill(config, store)  # now recorded: not read again
    assert store.fetched == [] and len(listing.done) == 1 and result.ok


def test_a_cut_part_keeps_its_whole_lines_and_stays_loud(tmp_path):
    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    whole = gzip.compress(("\n".join(lines(date(2026, 11, 1), "a", 2000)) + "\n").encode())
    store.put("pullzone-logs/www/2026/11/01_1.gzip", [], old, raw=whole[: len(whole) // 2])
    listing, result = backfill(config, store)
    assert not result.ok and result.failed
    assert "damaged" in (result.failed[0].result.error or "")
    kept = len(lake_ids(config, ZONE))
    assert 0 < kept < 2000
    rejected = lake_frame(config, "rejected_lines")
    assert rejected.filter(pl.col("kind") == "damaged file").height == 1
    # The next run does not read it again, and still says it is damaged.
    store.fetched.clear()
    listing, result = backfill(config, store)
    assert store.fetched == [] and not result.ok and len(listing.damaged) == 1
    assert lake_frame(config, "archive_parts")["state"].to_list() == ["damaged"]


def test_two_runs_of_one_zone_keep_out_of_each_others_downloads(tmp_path):
    """``cdnlake backfill`` beside the daemon's archive job: a run that starts while
    another is downloading a part neither deletes nor writes into that download."""
    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 10), old)
    store.put("pullzone-logs/www/2026/11/02_1.gzip", lines(date(2026, 11, 2), "b", 10), old)
    seen: list[tuple[Path, bytes]] = []
    real_fetch = store.fetch

    def fetch(path: str, dest: Path, *, size: int, checksum: str) -> None:
        real_fetch(path, dest, size=size, checksum=checksum)
        if not seen:  # the other run starts while this part is on disk
            seen.append((dest, dest.read_bytes()))
            other = FakeStore()
            other.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 10), old)
            with session_for(config) as session:
                job = Backfill(config, session, other, config.zones[0], clock=lambda: NOW)
                job.run(job.listing())
            assert dest.exists() and dest.read_bytes() == seen[0][1], "download deleted"

    store.fetch = fetch  # type: ignore[method-assign]
    _, result = backfill(config, store)
    assert result.ok and len(result.parts) == 2
    assert len(lake_ids(config, ZONE)) == 20
    left = config.storage.work / "archive" / str(ZONE)
    assert not [p for p in left.rglob("*") if p.is_file()], "a run's downloads stay behind"


def test_what_a_killed_run_left_is_removed(tmp_path):
    config = make_config(tmp_path)
    zone_dir = config.storage.work / "archive" / str(ZONE)
    (zone_dir / "run-killed").mkdir(parents=True)
    (zone_dir / "run-killed" / ".lock").write_bytes(b"")  # its lock died with it
    (zone_dir / "run-killed" / "01_1.gzip.partial").write_bytes(b"x" * 100)
    (zone_dir / "01_1.gzip").write_bytes(b"y")  # the layout of earlier versions
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 10), old)
    _, result = backfill(config, store)
    assert result.ok
    assert not [p for p in zone_dir.rglob("*") if p.is_file()]


def test_a_damaged_part_claims_no_loss_over_the_days_other_parts(tmp_path):
    """A part holds some of its day's requests (its writer's, up to its close): what its
    damage hides is not "the rest of the day", which later parts and other writers hold.
    The loss is the part's, said by its mark, ``archive_parts`` and ``rejected_lines``."""
    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    day = date(2026, 11, 1)
    cut = gzip.compress(("\n".join(lines(day, "a", 2000)) + "\n").encode())
    store.put("pullzone-logs/www/2026/11/01_1.gzip", [], old, raw=cut[: len(cut) // 2])
    noon = int(datetime(2026, 11, 1, 12, tzinfo=UTC).timestamp() * 1000)
    later = [GOOD.format(ts=noon + i * 1000, zone=ZONE, rid=f"b{i:024d}") for i in range(30)]
    store.put("pullzone-logs/www/2026/11/01_2.gzip", later, old)
    _, result = backfill(config, store)
    assert not result.ok and len(result.failed) == 1 and len(result.parts) == 2
    stored = lake_frame(config, "requests")
    assert stored.filter(pl.col("ts") >= datetime(2026, 11, 1, 12, tzinfo=UTC)).height == 30
    gaps = lake_frame(config, "ingest_gaps")
    assert gaps.height == 0, gaps.select("gap_from", "gap_to", "reason").to_dicts()
    assert lake_frame(config, "archive_parts").sort("path")["state"].to_list() == [
        "damaged",
        "imported",
    ]


def test_a_folder_the_storage_zone_does_not_hold_is_a_config_error(tmp_path):
    """``folder`` mistyped (it must be the pull zone's name as the provider writes it): an
    error naming the key, not "0 days, 0 parts" and success."""
    import pytest

    from cdnlake.errors import ConfigError

    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www-2/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 10), old)
    for days in ((None, None), (date(2026, 11, 1), date(2026, 11, 30))):
        with pytest.raises(ConfigError, match=r"zones\[0\]\.archive\.folder") as raised:
            backfill(config, store, first=days[0], last=days[1])
        assert "pullzone-logs/www/" in str(raised.value)
    assert lake_ids(config, ZONE) == []


def test_a_part_stopped_after_some_of_its_commits_is_not_marked_imported(tmp_path, monkeypatch):
    """Ctrl-C inside a part of many commits: what it committed stays, its mark does not
    (the mark rides only with the last rows), so the next run reads it again, whole, and
    each request is stored once."""
    import functools
    import threading

    from cdnlake.ingest import v1_source

    monkeypatch.setattr(
        v1_source, "iter_parsed", functools.partial(v1_source.iter_parsed, block_bytes=4096)
    )
    raw = {
        "storage": {"root": str(tmp_path / "data")},
        "ingest": {"flush_rows": 50},
        "zones": [
            {
                "id": ZONE,
                "archive": {"storage_zone": "logs", "folder": "www", "password_env": "ARCHIVE_PW"},
            }
        ],
    }
    config = build_config(raw, base_dir=tmp_path, env={"ARCHIVE_PW": "pw"})
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 2000), old)
    stop = threading.Event()

    class StopAfterFirstCommit:
        def listed(self, listing):
            pass

        def reading(self, part, result):
            if result.rows:
                stop.set()  # Ctrl-C once the part's first rows are in the lake

        def part_done(self, done, index):
            pass

        def skipped(self, part):
            pass

    with session_for(config) as session:
        job = Backfill(
            config,
            session,
            store,
            config.zones[0],
            clock=lambda: NOW,
            progress=StopAfterFirstCommit(),
            stop=stop,
        )
        result = job.run(job.listing())
    assert result.stopped
    kept = len(lake_ids(config, ZONE))
    assert 0 < kept < 2000
    listing, result = backfill(config, store)
    assert [p.name for p in listing.todo] == ["01_1.gzip"], "marked imported with rows missing"
    assert result.ok and result.rows == 2000 - kept
    ids = lake_ids(config, ZONE)
    assert len(ids) == len(set(ids)) == 2000


def test_a_part_another_run_imported_meanwhile_is_skipped_and_said(tmp_path):
    """The daemon's archive job imports a part between this run's listing and its turn:
    not read again, and the progress hears of it (else its bar never reaches the end)."""
    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 10), old)
    store.put("pullzone-logs/www/2026/11/02_1.gzip", lines(date(2026, 11, 2), "b", 10), old)
    heard: list[str] = []

    class Heard:
        def listed(self, listing):
            pass

        def reading(self, part, result):
            pass

        def part_done(self, done, index):
            heard.append(f"done {done.part.name}")

        def skipped(self, part):
            heard.append(f"skipped {part.name}")

    with session_for(config) as session:
        job = Backfill(config, session, store, config.zones[0], clock=lambda: NOW, progress=Heard())
        listing = job.listing()
        backfill(config, store, first=date(2026, 11, 1), last=date(2026, 11, 1))  # the other
        store.fetched.clear()
        result = job.run(listing)
    assert store.fetched == ["pullzone-logs/www/2026/11/02_1.gzip"]
    assert heard == ["skipped 01_1.gzip", "done 02_1.gzip"]
    assert result.ok and [p.name for p in result.skipped] == ["01_1.gzip"]


def test_a_damaged_part_is_read_again_when_the_archive_holds_another_copy(tmp_path):
    """With a checksum in the listing or without: another copy of a damaged part (its
    size, checksum or last change differ) is read again; the same copy is not."""
    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    whole = gzip.compress(("\n".join(lines(date(2026, 11, 1), "a", 2000)) + "\n").encode())
    path = "pullzone-logs/www/2026/11/01_1.gzip"
    store.put(path, [], old, raw=whole[: len(whole) // 2])
    real_list = store.list_folder

    def no_checksums(folder: str) -> list[Entry]:
        return [
            Entry(e.name, e.is_directory, e.length, e.last_changed, "") for e in real_list(folder)
        ]

    store.list_folder = no_checksums  # type: ignore[method-assign]
    listing, result = backfill(config, store)
    assert not result.ok and "damaged" in (result.failed[0].result.error or "")
    store.fetched.clear()
    listing, result = backfill(config, store)  # the same copy: named, not read again
    assert store.fetched == [] and len(listing.damaged) == 1
    assert 0 < listing.damaged[0][1] < 2000  # its last whole line
    store.put(path, [], old + timedelta(hours=1), raw=whole)  # the provider's whole copy
    store.fetched.clear()
    listing, result = backfill(config, store)
    assert store.fetched == [path] and result.ok and not listing.damaged
    ids = lake_ids(config, ZONE)
    assert len(ids) == len(set(ids)) == 2000
    assert lake_frame(config, "archive_parts")["state"].to_list() == ["imported"]


def test_a_listing_never_takes_back_what_another_run_imported_since(tmp_path):
    """A listing made before another run imported a part, recorded after it: the part
    stays done in ``archive_parts``, not read a third time."""
    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 10), old)
    with session_for(config) as session:
        job = Backfill(config, session, store, config.zones[0], clock=lambda: NOW)
        parts = [p for p in job._parts(None, None)]
        backfill(config, store)  # the other run imports it
        job._record_listing(
            __import__("cdnlake.ingest.backfill", fromlist=["Listing"]).Listing(todo=parts),
            NOW,
        )
    assert lake_frame(config, "archive_parts")["state"].to_list() == ["imported"]
    store.fetched.clear()
    listing, _ = backfill(config, store)
    assert store.fetched == [] and len(listing.done) == 1


def test_archived_parts_leave_the_requests_log_bounded(tmp_path):
    """Parts done are recorded in ``archive_parts``, never in the ``requests`` log: the
    zone's application transactions there are the same for 1 part as for 6, and 100,000
    parts recorded done leave the log's checkpoint and a mark look-up as they were."""
    import json
    import time

    import pyarrow.parquet as pq

    from cdnlake.lake.log.progress import WATERMARK
    from cdnlake.lake.log.schema import REQUESTS
    from cdnlake.lake.log.store import Lake
    from cdnlake.lake.zone.bookkeeping import Bookkeeping

    def app_ids(config) -> set[str]:
        log = Lake.from_config(config.storage).local / "requests" / "_delta_log"  # type: ignore[operator]
        return {
            json.loads(line)["txn"]["appId"]
            for entry in sorted(log.glob("*.json"))
            for line in entry.read_text().splitlines()
            if line.startswith('{"txn"')
        }

    old = datetime(2026, 11, 2, tzinfo=UTC)
    seen, configs = [], []
    for n in (1, 6):
        config = make_config(tmp_path / str(n))
        store = FakeStore()
        for i in range(n):
            day = date(2026, 11, 1 + i)
            store.put(f"pullzone-logs/www/2026/11/{day.day:02d}_1.gzip", lines(day, "a", 10), old)
        _, result = backfill(config, store)
        assert result.ok and len(result.parts) == n
        seen.append(app_ids(config))
        configs.append(config)
    assert seen[0] and seen[0] == seen[1], seen
    assert not [app for app in seen[1] if "archive" in app]

    config = configs[1]
    lake = Lake.from_config(config.storage)

    def checkpoint() -> tuple[int, int, float]:
        """The requests checkpoint's txn actions and bytes, and a mark look-up's time."""
        table = lake.open(REQUESTS)
        assert table is not None
        table.create_checkpoint()
        log = lake.local / "requests" / "_delta_log"  # type: ignore[operator]
        newest = max(log.glob("*.checkpoint.parquet"))
        txns = pq.read_table(newest, columns=["txn"]).column("txn").drop_null()
        best = float("inf")
        for _ in range(5):
            began = time.perf_counter()
            with session_for(config) as session:
                session.log_table(REQUESTS).marks([ZONE], WATERMARK)
            best = min(best, time.perf_counter() - began)
        return len(txns), newest.stat().st_size, best

    before = checkpoint()
    rows = [
        {
            "path": f"2026/11/01_{i}-0-00000000.gzip",
            "day": date(2026, 11, 1),
            "size": 100,
            "checksum": "",
            "last_changed": old,
            "state": "imported",
            "listed_at": None,
        }
        for i in range(100_000)
    ]
    with session_for(config) as session:
        Bookkeeping(session).record_archive_parts(ZONE, rows, listing=False)
        job = Backfill(config, session, FakeStore(), config.zones[0], clock=lambda: NOW)
        assert len(job.recorded()) == 100_006
    after = checkpoint()
    assert after[0] == before[0], (before, after)  # the same txn actions
    assert after[1] <= before[1] * 1.1, (before, after)
    # (the look-up's time is a benchmark's: with the same txn actions it reads the same)


def test_an_archive_import_counts_its_traffic_under_source_archive(tmp_path):
    """Catch-up is no live traffic: rules leave ``source="archive"`` out (alerts.yml)."""
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.monitoring.traffic import TrafficCounters
    from cdnlake.privacy import PrivacyPolicy

    config = make_config(tmp_path)
    store = FakeStore()
    old = datetime(2026, 11, 2, tzinfo=UTC)
    store.put("pullzone-logs/www/2026/11/01_1.gzip", lines(date(2026, 11, 1), "a", 50), old)
    counters = TrafficCounters()
    session = LakeSession.from_config(
        config.storage, privacy=PrivacyPolicy.from_config(config.privacy), traffic=counters
    )
    job = Backfill(config, session, store, config.zones[0], clock=lambda: NOW)
    assert job.run(job.listing()).rows == 50
    requests, sent = counters.counts()
    assert requests == {(str(ZONE), "archive", "HIT", "2xx"): 50}
    assert sent == {(str(ZONE), "archive", "HIT"): 50 * 412}
