"""The Delta commit protocol as cdnlake uses it, on a local lake and on S3 (moto)."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from deltalake import DeltaTable

from cdnlake.config import build_config
from cdnlake.lake.log.files import ROW_GROUP_ROWS
from cdnlake.lake.log.progress import DAYS, WATERMARK, DayCursor, from_ms, to_ms
from cdnlake.lake.log.schema import INGEST_GAPS, REQUEST_SCHEMA, REQUESTS, polars_schema
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep.maintain import maintain
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.warehouse.db import Warehouse
from tests.sessions import mark_of, session_of

BASE = datetime(2026, 11, 20, tzinfo=UTC)


def rows(first: int, n: int, at: datetime, tag: str = "r") -> pl.DataFrame:
    """``n`` requests ``tag<first>`` .. one millisecond apart from ``at``."""
    frame = pl.DataFrame(
        {
            "ts": [at + timedelta(milliseconds=i) for i in range(n)],
            "request_id": [f"{tag}{first + i:08d}" for i in range(n)],
        }
    ).with_columns(pl.col("ts").dt.cast_time_unit("ms"))
    columns = polars_schema(REQUEST_SCHEMA)
    missing = [pl.lit(None, t).alias(c) for c, t in columns.items() if c not in frame]
    return frame.with_columns(missing).select(list(REQUEST_SCHEMA))


@pytest.fixture
def storage(tmp_path, lake_kind, request):
    raw: dict = {"storage": {"root": str(tmp_path / "data")}}
    if lake_kind == "s3":
        server = request.getfixturevalue("s3_server")
        raw["storage"]["lake_uri"] = f"s3://{server.new_bucket()}/lake"
        raw["storage"]["s3"] = {"endpoint_url": server.url, "allow_http": True}
    return build_config(raw, base_dir=tmp_path, env={}).storage


def test_repeats_are_dropped_and_progress_rides_with_the_rows(storage):
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    first = writer.commit(rows(0, 1000, BASE), {WATERMARK: to_ms(BASE), DAYS: 5 << 32})
    again = writer.commit(rows(500, 1000, BASE + timedelta(milliseconds=500)), {})
    assert (first.new, first.duplicates) == (1000, 0)
    assert (again.new, again.duplicates) == (500, 500)
    assert from_ms(mark_of(writer, WATERMARK)) == BASE  # unchanged when not given
    assert DayCursor.decode(mark_of(writer, DAYS)) == DayCursor(DayCursor.decode(5 << 32).day)
    # A repeat whose time is in seconds (some v1 exports) is still a repeat.
    seconds = rows(0, 1, BASE.replace(microsecond=0))
    assert writer.commit(seconds, {}).duplicates == 1
    table = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    assert table.to_pyarrow_table().num_rows == 1500
    assert table.transaction_version("cdnlake/requests/1") == to_ms(BASE)


def test_a_commit_across_midnight_writes_one_file_per_day(storage):
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    midnight = BASE + timedelta(days=1)
    writer.commit(rows(0, 300, midnight - timedelta(milliseconds=100)), {})  # 100 + 200
    writer.commit(rows(300, 50, midnight + timedelta(hours=1)), {})  # one day: one file
    table = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    files = table.get_add_actions(flatten=True)
    days = files.column("partition.date").to_pylist()
    counts = files.column("num_records").to_pylist()
    per_day = sorted(zip(days, counts, strict=True))
    assert per_day == [(BASE.date(), 100), (midnight.date(), 50), (midnight.date(), 200)]
    stored = pl.from_arrow(table.to_pyarrow_table(columns=["date", "ts"]))
    assert stored.filter(pl.col("ts").dt.date() != pl.col("date")).height == 0


def test_deduplication_reads_what_the_window_touches_not_the_table(storage):
    writer = ZoneWriter(session_of(Lake.from_config(storage)), REQUESTS, 1)
    for hour in range(30):
        writer.commit(rows(hour * 100, 100, BASE + timedelta(hours=hour)), {})
    later = ZoneWriter(
        session_of(Lake.from_config(storage)), REQUESTS, 1
    )  # the next process's pass
    late = later.commit(rows(2900, 150, BASE + timedelta(hours=29)), {})
    assert late.duplicates == 100 and late.new == 50
    assert late.reads.files == 1  # of 30 files in the table


def test_a_writer_finds_repeats_of_its_last_commit_without_reading_it_back(storage):
    """An import's next chunk, or the next commit of a long pass, meets the rows the
    same writer has just committed: it knows their keys, and reads no file; a file it
    did not write itself it reads."""
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 100, BASE), {})
    again = writer.commit(rows(50, 100, BASE + timedelta(milliseconds=50)), {})
    assert (again.new, again.duplicates, again.reads.files) == (50, 50, 0)
    assert again.reads.keys == 100  # the remembered keys within the rows' time range
    other = ZoneWriter(session_of(lake), REQUESTS, 1)  # another process, in between
    other.commit(rows(150, 10, BASE + timedelta(milliseconds=150)), {})
    third = writer.commit(rows(140, 30, BASE + timedelta(milliseconds=140)), {})
    assert (third.new, third.duplicates) == (10, 20)
    # Read: its own first file (only the last commit is remembered) and the other
    # writer's; the last one it wrote, remembered.
    assert (third.reads.files, third.reads.keys) == (2, 100 + 10 + 50)
    table = lake.open(REQUESTS)
    assert table is not None
    ids = table.to_pyarrow_table(columns=["request_id"]).column("request_id").to_pylist()
    assert sorted(ids) == [f"r{i:08d}" for i in range(170)]


def test_readers_only_ever_see_whole_commits(storage):
    """polars and DuckDB read while 30 commits of 100 rows land: always a multiple of 100."""
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    writer.commit(rows(0, 100, BASE), {})
    done = threading.Event()
    read_once = threading.Event()  # the reader took a sample since the writer last looked
    seen: list[int] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for i in range(1, 31):
                writer.commit(rows(i * 100, 100, BASE + timedelta(minutes=i)), {})
                if i % 10 == 0:  # on a busy machine too, reads land between commits
                    read_once.clear()
                    read_once.wait(timeout=60)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    def read() -> None:
        warehouse = Warehouse(storage, lake)
        uri = lake.table_uri(REQUESTS)
        while not done.is_set():
            try:
                with warehouse.connect() as con:
                    seen.append(con.execute("SELECT count(*) FROM requests").fetchone()[0])
                count = pl.scan_delta(uri, storage_options=lake.storage_options or None)
                seen.append(count.select(pl.len()).collect().item())
                read_once.set()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(seen) >= 4 and all(n % 100 == 0 for n in seen), seen
    assert max(seen) <= 3100


def test_maintain_compacts_checkpoints_vacuums_and_keeps_progress(storage):
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    for i in range(40):  # a daemon's small commits
        writer.commit(rows(i * 10, 10, BASE + timedelta(minutes=i)), {WATERMARK: to_ms(BASE) + i})
    table = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    assert len(table.file_uris()) == 40
    report = maintain(session_of(lake), retention_hours=0, now=BASE)
    (requests,) = [t for t in report.tables if t.table == "requests"]
    assert requests.files_before == 40 and requests.files_after == 1
    assert requests.compacted == 40 and requests.vacuumed == 40
    table = DeltaTable(lake.table_uri(REQUESTS), storage_options=lake.storage_options)
    assert table.to_pyarrow_table().num_rows == 400
    assert table.transaction_version("cdnlake/requests/1") == to_ms(BASE) + 39
    local = lake.local
    if local is not None:
        log = local / "requests" / "_delta_log"
        assert list(log.glob("*.checkpoint.parquet"))
        assert len(list((local / "requests").rglob("*.parquet"))) == 1 + len(
            list(log.glob("*.checkpoint.parquet"))
        )


def test_maintain_sorts_a_day_so_a_window_reads_only_its_minutes(storage):
    """After maintain a day is sorted by ``ts`` in small row groups: a commit of repeats
    reads the keys of the row group holding its minutes, not of the whole day."""
    lake = Lake.from_config(storage)
    writer = ZoneWriter(session_of(lake), REQUESTS, 1)
    for hour in (3, 0, 4, 1, 2):  # late windows: commits out of time order
        writer.commit(rows(hour * 10_000, 10_000, BASE + timedelta(hours=hour)), {})
    maintain(session_of(lake), retention_hours=0, now=BASE)

    table = lake.open(REQUESTS)
    (fragment,) = lake.dataset(REQUESTS, table).get_fragments()
    groups = [fragment.metadata.row_group(i) for i in range(fragment.metadata.num_row_groups)]
    assert sum(g.num_rows for g in groups) == 50_000
    assert all(g.num_rows <= ROW_GROUP_ROWS for g in groups)
    ts = fragment.physical_schema.get_field_index("ts")
    spans = [(g.column(ts).statistics.min, g.column(ts).statistics.max) for g in groups]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans

    after = ZoneWriter(session_of(lake), REQUESTS, 1).commit(
        rows(20_000, 100, BASE + timedelta(hours=2)), {}
    )
    assert after.duplicates == 100 and after.new == 0
    assert after.reads.keys <= ROW_GROUP_ROWS  # of the day's 50,000


def test_writers_racing_to_create_a_table_all_land(storage):
    """The first passes of several zones create a bookkeeping table at once. The losers
    of that race must open the winner's table, not commit a second creation, which made
    a writer already holding version 0 fail ("Metadata changed since last commit") and
    a zone's run go unrecorded."""
    lake = Lake.from_config(storage)
    hour = BASE + timedelta(hours=1)  # a span: an empty one claims nothing and is not written
    gap = {"gap_from": BASE, "gap_to": hour, "reason": "r", "detected_at": BASE, "source": "v2"}
    failures: list[BaseException] = []

    def record(fresh: Lake, start: threading.Barrier, zone: int) -> None:
        start.wait()
        try:
            Bookkeeping(session_of(fresh)).record_gaps(zone, [{**gap, "run_id": f"run-{zone}"}])
        except BaseException as exc:
            failures.append(exc)

    for trial in range(12):
        fresh = Lake(f"{lake.uri.rstrip('/')}/race{trial}", lake.storage_options)
        start = threading.Barrier(3)
        threads = [threading.Thread(target=record, args=(fresh, start, zone)) for zone in (1, 2, 3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        table = fresh.open(INGEST_GAPS)
        assert table is not None and table.version() == 3  # one creation, three writes
        zones = table.to_pyarrow_table(columns=["zone"]).column("zone").to_pylist()
        assert sorted(zones) == [1, 2, 3]
