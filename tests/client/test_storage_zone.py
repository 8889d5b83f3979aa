"""The storage-zone client against the emulator's storage zone, over HTTP."""

from __future__ import annotations

import gzip
import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cdnlake.client import ApiClient, CdnApi, RequestStats, StorageObject, StorageZoneClient
from cdnlake.config import ApiConfig, Secret
from cdnlake.emulator import DEFAULT_STORAGE_ZONES, Emulator, Faults
from cdnlake.errors import CorruptDownloadError, UnauthorizedError
from tests.conftest import FAST_RETRY, KEY, start_emulator

STORE = DEFAULT_STORAGE_ZONES[0]
MONTH = "pullzone-logs/zone-1234/2026/11/"
OLD_NAME = re.compile(r"^\d{2}_[1-9]\d*\.gzip$")
NEW_NAME = re.compile(r"^\d{2}_(100|101)-\d+-[0-9a-f]{8}\.gzip$")


def archived(**extra: Any) -> Emulator:
    """Zone 1234 archived from 2026-11-14 (the clock stands at 2026-11-20 12:00), its
    first two days under the older naming scheme; zone 1235 not archived."""
    options: dict[str, Any] = {"archive_days": 6, "archive_legacy_days": 2, **extra}
    return start_emulator("1234:archived,1235", rpm=1, **options)


@contextmanager
def running(**extra: Any) -> Iterator[Emulator]:
    emu = archived(**extra)
    try:
        yield emu
    finally:
        emu.stop()


def storage(emu: Emulator, password: str = STORE.read_only_password) -> StorageZoneClient:
    api = ApiClient(ApiConfig(base_url=emu.url, access_key=Secret(KEY)), retry=FAST_RETRY)
    return StorageZoneClient(
        api, STORE.name, Secret(password), password_env="ARCHIVE_KEY", base_url=emu.storage_url
    )


@pytest.fixture(scope="module")
def emu():
    e = archived()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def month(emu) -> list[StorageObject]:
    return storage(emu).list(MONTH)


def biggest(entries: list[StorageObject]) -> StorageObject:
    return max(entries, key=lambda e: e.length)


def test_the_listing_walks_down_to_parts_in_both_naming_schemes(emu, month):
    client = storage(emu)
    assert [(e.object_name, e.is_directory) for e in client.list("")] == [("pullzone-logs", True)]
    assert [e.object_name for e in client.list("pullzone-logs/")] == ["zone-1234"]
    assert [e.object_name for e in client.list("pullzone-logs/zone-1234/")] == ["2026"]
    assert [e.object_name for e in client.list("pullzone-logs/zone-1234/2026")] == ["11"]
    old = {e.object_name[:2] for e in month if OLD_NAME.match(e.object_name)}
    new = {e.object_name[:2] for e in month if NEW_NAME.match(e.object_name)}
    assert old == {"14", "15"} and new == {"16", "17", "18", "19", "20"}
    assert all(OLD_NAME.match(e.object_name) or NEW_NAME.match(e.object_name) for e in month)
    for entry in month:
        assert not entry.is_directory and entry.length > 0
        assert re.fullmatch(r"[0-9A-Fa-f]{64}", entry.checksum or "")
        assert entry.last_changed is not None and entry.last_changed.tzinfo is not None
        assert entry.path == f"/{STORE.name}/{MONTH}" and entry.relative_path.startswith(MONTH)
    # Both writers of the newer scheme wrote parts of the same day.
    writers = {e.object_name[3:6] for e in month if e.object_name.startswith("17_")}
    assert writers == {"100", "101"}


def test_a_download_streams_to_disk_and_matches_the_listed_checksum(emu, month, tmp_path):
    entry = biggest(month)
    dest = tmp_path / "part.gz"
    assert storage(emu).download(entry, dest) == entry.length
    raw = dest.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == (entry.checksum or "").lower()
    lines = gzip.decompress(raw).decode().splitlines()
    assert lines and all(line.split("|")[4] == "1234" for line in lines)
    assert not (tmp_path / "part.gz.partial").exists()


def test_a_cut_download_resumes_with_range_where_it_broke_off(tmp_path):
    with running(faults=Faults(storage_cut_after=1500)) as emu:
        client = storage(emu)
        entry = biggest(client.list(MONTH))
        assert entry.length > 4 * 1500
        received: list[int] = []
        stats = RequestStats()
        size = client.download(entry, tmp_path / "p.gz", progress=received.append, stats=stats)
        assert size == entry.length
        # Every byte came once: each attempt asked for the rest, not for the whole file.
        assert sum(received) == entry.length and stats.requests > entry.length // 1500
        digest = hashlib.sha256((tmp_path / "p.gz").read_bytes()).hexdigest()
        assert digest == (entry.checksum or "").lower()


def test_a_partial_file_left_by_an_earlier_run_is_continued(emu, month, tmp_path):
    entry = biggest(month)
    whole = tmp_path / "whole.gz"
    storage(emu).download(entry, whole)
    dest = tmp_path / "again.gz"
    (tmp_path / "again.gz.partial").write_bytes(whole.read_bytes()[:1000])
    received: list[int] = []
    storage(emu).download(entry, dest, progress=received.append)
    assert sum(received) == entry.length - 1000
    assert dest.read_bytes() == whole.read_bytes()


def test_a_corrupted_download_is_fetched_again(tmp_path):
    with running() as emu:
        client = storage(emu)
        entry = biggest(client.list(MONTH))
        emu.faults.update({"archive_corrupt_once": f"*/{entry.object_name}"})
        stats = RequestStats()
        assert client.download(entry, tmp_path / "p.gz", stats=stats) == entry.length
        assert stats.retries == 1
        digest = hashlib.sha256((tmp_path / "p.gz").read_bytes()).hexdigest()
        assert digest == (entry.checksum or "").lower()


def test_a_checksum_that_never_matches_is_one_terminal_line(tmp_path):
    with running() as emu:
        client = storage(emu)
        name = biggest(client.list(MONTH)).object_name
        emu.faults.update({"archive_bad_checksum": f"zone-1234/2026/11/{name}"})
        entry = next(e for e in client.list(MONTH) if e.object_name == name)
        with pytest.raises(CorruptDownloadError) as caught:
            client.download(entry, tmp_path / "p.gz")
        assert not caught.value.transient and "\n" not in str(caught.value)
        assert "checksum" in str(caught.value)
        assert list(tmp_path.iterdir()) == []  # neither the file nor a partial one


def test_a_wrong_password_is_one_line_naming_the_zone_and_the_variable(emu):
    with pytest.raises(UnauthorizedError) as caught:
        storage(emu, password="not-the-password").list(MONTH)
    text = str(caught.value)
    assert not caught.value.transient and "\n" not in text
    assert STORE.name in text and "ARCHIVE_KEY" in text and "not-the-password" not in text
    assert "not-the-password" not in repr(storage(emu, password="not-the-password"))


def test_the_full_password_reads_too(emu):
    assert storage(emu, password=STORE.password).list("pullzone-logs/")


def test_storage_zones_and_permanent_storage_through_the_management_api(emu):
    cdn = CdnApi(ApiClient(ApiConfig(base_url=emu.url, access_key=Secret(KEY)), retry=FAST_RETRY))
    zones = list(cdn.storagezone.iter_storage_zones())
    assert [(z.id, z.name) for z in zones] == [(STORE.id, STORE.name)]
    zone = cdn.storagezone.get_storage_zone(STORE.id)
    assert zone.read_only_password == STORE.read_only_password
    assert zone.storage_hostname and STORE.password not in repr(zone)
    assert zone.masked().password == "***" and zone.masked().read_only_password == "***"
    assert cdn.pullzone.get_pull_zone(1234).logging_save_to_storage
    assert not cdn.pullzone.get_pull_zone(1235).logging_save_to_storage
    on = cdn.pullzone.set_archive(1235, STORE.id)
    assert on.logging_save_to_storage and on.logging_storage_zone_id == STORE.id
    assert [e.object_name for e in storage(emu).list("pullzone-logs/")] == [
        "zone-1234",
        "zone-1235",
    ]
    off = cdn.pullzone.disable_archive(1235)
    assert not off.logging_save_to_storage


def test_download_into_a_stream_from_an_offset(emu, month):
    import io

    entry = biggest(month)
    whole = io.BytesIO()
    storage(emu).download_to(entry.relative_path, whole)
    tail = io.BytesIO()
    assert storage(emu).download_to(entry.relative_path, tail, offset=100) == entry.length - 100
    assert tail.getvalue() == whole.getvalue()[100:]


def test_paths_cannot_climb_out_of_the_zone(emu, tmp_path: Path):
    from cdnlake.errors import RequestValidationError

    with pytest.raises(RequestValidationError):
        storage(emu).download("pullzone-logs/../../x", tmp_path / "x")


def test_a_stop_keeps_the_partial_file_and_the_next_call_finishes_it(tmp_path):
    from cdnlake.errors import StopRequested

    with running(faults=Faults(storage_cut_after=3000)) as emu:
        client = storage(emu)
        entry = biggest(client.list(MONTH))
        dest = tmp_path / "p.gz"

        def stop_after_a_chunk(_: int) -> None:
            client.api.abort.set()  # what Ctrl-C does to the shared client

        with pytest.raises(StopRequested):
            client.download(entry, dest, progress=stop_after_a_chunk)
        kept = (tmp_path / "p.gz.partial").stat().st_size
        assert 0 < kept < entry.length and not dest.exists()
        client.api.abort.clear()
        received: list[int] = []
        assert client.download(entry, dest, progress=received.append) == entry.length
        assert sum(received) == entry.length - kept
        assert hashlib.sha256(dest.read_bytes()).hexdigest() == (entry.checksum or "").lower()


def test_a_part_that_grew_since_the_listing_comes_as_listed(tmp_path):
    with running(archive_days=0, archive_legacy_days=0) as emu:
        client = storage(emu)
        listed = client.list(MONTH)
        entry = max(listed, key=lambda e: (e.object_name[3:6], e.last_changed))
        emu.clock.advance(900)  # the open part takes more lines
        grown = next(e for e in client.list(MONTH) if e.object_name == entry.object_name)
        assert grown.length > entry.length
        assert client.download(entry, tmp_path / "old.gz") == entry.length
        assert client.download(grown, tmp_path / "new.gz") == grown.length
        by_path = client.download(
            entry.relative_path, tmp_path / "p.gz", checksum=entry.checksum, length=entry.length
        )
        assert by_path == entry.length
        assert (tmp_path / "new.gz").read_bytes().startswith((tmp_path / "old.gz").read_bytes())
