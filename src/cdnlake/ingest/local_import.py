"""``import-v1``: local v1 day files through the one runner.

Apart from the passes over the provider's API, so that importing a file on disk never
loads the HTTP client.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from cdnlake.config import Config
from cdnlake.errors import DamagedInputError
from cdnlake.ingest.result import ZoneResult
from cdnlake.ingest.runner import Chunk, PassContext, Runner
from cdnlake.ingest.v1_source import V1FileSource
from cdnlake.lake.zone.session import LakeSession


@dataclass
class ImportResult:
    files: int = 0
    lines: int = 0
    rows: int = 0
    duplicates: int = 0
    erased: int = 0
    rejected: int = 0
    blank: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    results: list[ZoneResult] = field(default_factory=list)

    def add(self, result: ZoneResult) -> None:
        self.files += 1
        self.lines += result.lines
        self.blank += result.blank
        self.rows += result.rows
        self.duplicates += result.duplicates
        self.erased += result.erased
        self.rejected += result.rejected
        self.reasons.update(result.reasons)
        self.results.append(result)


class _Quiet:
    def update(self, result: ZoneResult) -> None:
        pass

    def finished(self, result: ZoneResult) -> None:
        pass


class _LocalV1File(V1FileSource):
    """A file on disk: one named ``.gz`` that is empty was cut short before its gzip
    header, not a day without traffic (an empty gzip file still holds 20 bytes)."""

    def chunks(self, ctx: PassContext) -> Iterator[Chunk]:
        if self.path.name.endswith(".gz") and self.path.stat().st_size == 0:
            exc = DamagedInputError(
                f"{self.label} is empty (0 bytes): a gzip file cut short before its header",
                last_line=0,
            )
            self._record_damage(ctx, exc)
            raise exc
        yield from super().chunks(ctx)


SNIFF_BYTES = 1 << 20  # how much of a file's start tells whose logs it holds


def file_zones(path: Path) -> Counter[int]:
    """The pull zones of the lines at the start of a v1 file (its first MiB, unpacked):
    a day file holds one zone's lines, so a file of another zone is told before any line
    is stored. Lines that do not parse say nothing here (the parser rejects them)."""
    from cdnlake.ingest.v1_parser import LogStream

    head = b""
    with LogStream(path) as stream:
        while len(head) < SNIFF_BYTES and (more := stream.read(SNIFF_BYTES - len(head))):
            head += more
    lines = head.split(b"\n")
    if len(head) >= SNIFF_BYTES:
        lines = lines[:-1]  # cut by the sample's end
    zones: Counter[int] = Counter()
    for line in lines:
        fields = line.split(b"|")
        if 12 <= len(fields) <= 15 and fields[4].strip().isdigit():
            zones[int(fields[4])] += 1
    return zones


STDIN = "-"  # the name standard input goes by, in messages and rejected_lines.file
COPY_BYTES = 1 << 20


@contextmanager
def stdin_copy(work: Path, stream: BinaryIO) -> Iterator[Path]:
    """``stream`` (standard input) copied to a file under ``<work>/downloads/``, a block
    at a time (a day file can be gigabytes); removed again on the way out, whatever
    happened. The file is named ``-`` (in a folder of its own), the name messages give
    it; the parser tells gzip from plain text by its first bytes."""
    folder = work / "downloads"
    folder.mkdir(parents=True, exist_ok=True)
    own = Path(tempfile.mkdtemp(prefix="stdin-", dir=folder))
    try:
        path = own / STDIN
        with path.open("wb") as out:
            shutil.copyfileobj(stream, out, COPY_BYTES)
        yield path
    finally:
        shutil.rmtree(own, ignore_errors=True)


def import_v1_files(
    config: Config,
    session: LakeSession,
    paths: list[Path],
    zone_id: int,
    *,
    labels: list[str] | None = None,
    on_file: Callable[[str, ZoneResult], None] | None = None,
    stop: threading.Event | None = None,
) -> ImportResult:
    """Parse local v1 day files into the lake; bad lines go to ``rejected_lines``.

    ``labels``: what to call each file (default: its path). ``stop``: once set, the file
    being read stops at its next chunk (what it committed stays; its outcome is
    "stopped") and no further file is started."""
    runner = Runner(config, session, reporter=_Quiet(), stop=stop)
    total = ImportResult()
    for path, label in zip(paths, labels or [str(p) for p in paths], strict=True):
        if stop is not None and stop.is_set():
            break
        result = runner.run(zone_id, _LocalV1File(path, label))
        total.add(result)
        if on_file is not None:
            on_file(label, result)
    return total
