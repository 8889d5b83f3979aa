"""Forwarded lines, held in a bounded buffer and committed, every zone of a flush at once.

Each line is parsed by the v1 parser's own rules (:func:`cdnlake.ingest.v1_parser.parse_block`)
and its rows committed with ``source = 'forwarded'`` through :class:`ZoneWriter`, the commit
and deduplication of every other source: whichever way a request comes first (forwarding or
a logging API pass), it is stored once. A flush's zones are submitted together to the
table's one committer (:func:`~cdnlake.lake.zone.writer.commit_together`), so they land in one
commit, with the shares of the passes waiting at that moment. A forwarded commit carries no
progress, so the zone's watermark stays where the last pass put it and the next pass fills
what forwarding lost.

A message whose text starts with ``{`` is the provider's JSON format
(:mod:`.json_messages`), any other a plain v1 line; each message is told apart on its own,
so a zone that switches formats while it sends loses nothing, and both end as the same rows.

A line whose field 5 (a JSON message's ``pullZoneId``) names a configured zone but breaks
a rule is kept in ``rejected_lines`` under that zone. Anything else (not syslog, no zone, a
zone that is not configured) is only counted: storing it would let any sender write
partitions of zones this lake does not hold.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field

import polars as pl

from cdnlake.config import Config
from cdnlake.errors import CdnlakeError
from cdnlake.forwarding import json_messages
from cdnlake.ingest.result import utcnow
from cdnlake.ingest.v1_parser import Block, parse_block
from cdnlake.lake.log.schema import REQUESTS, polars_schema
from cdnlake.lake.zone.bookkeeping import Bookkeeping, rejects_frame
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter, commit_together

log = logging.getLogger("cdnlake.forwarding")

SOURCE = "forwarded"
ROWS = polars_schema(REQUESTS.columns)
DEFAULT_MAX_LINES = 100_000  # lines held (buffered and awaiting commit) before senders wait


@dataclass(frozen=True)
class Line:
    text: str  # the syslog message's text: one v1 line or JSON object, or what claims to be
    seq: int  # the receiver's number of the message: its line number in rejected_lines


@dataclass
class Counts:
    """What the receiver did, since it started."""

    messages: int = 0  # syslog messages taken into the buffer
    rows: int = 0  # new rows committed
    duplicates: int = 0  # rows the lake already held (from a pass or an earlier message)
    erased: int = 0  # rows an erasure covers, held back (cdnlake forget): not duplicates
    rejected: int = 0  # lines kept in rejected_lines
    dropped: Counter[str] = field(default_factory=Counter)  # counted, not stored, by reason
    rows_by_zone: Counter[int] = field(default_factory=Counter)  # ``rows``, per zone
    rejected_by_zone: Counter[int] = field(default_factory=Counter)  # ``rejected``, per zone


class Buffer:
    """The lines received and not yet committed, shared by the receiver and the committer.

    ``full`` counts the rows being committed and those of a commit that failed and waits to
    be tried again, so memory stays bounded however slow the lake is or long it refuses:
    TCP senders then wait (back-pressure) and UDP datagrams are dropped and counted.
    """

    def __init__(self, max_lines: int = DEFAULT_MAX_LINES) -> None:
        self.max_lines = max_lines
        self.counts = Counts()
        self.wake = threading.Event()  # set when the buffer fills: commit now
        self._lines: list[Line] = []
        self._held = 0  # rows parsed, waiting for a commit that failed
        self._seq = 0
        self._lock = threading.Lock()

    def full(self) -> bool:
        return len(self._lines) + self._held >= self.max_lines

    def put(self, text: str) -> None:
        with self._lock:
            self._seq += 1
            self._lines.append(Line(text, self._seq))
            self.counts.messages += 1
            if len(self._lines) + self._held >= self.max_lines:
                self.wake.set()

    def drop(self, reason: str, n: int = 1) -> int:
        """Count ``n`` messages dropped for ``reason``; the count so far."""
        with self._lock:
            self.counts.dropped[reason] += n
            return self.counts.dropped[reason]

    def take(self) -> list[Line]:
        """The lines received so far; they count as held until :meth:`hold` says what is
        left of them (a commit in progress is memory too)."""
        with self._lock:
            lines, self._lines = self._lines, []
            self._held += len(lines)
            return lines

    def hold(self, rows: int) -> None:
        with self._lock:
            self._held = rows


class Flusher:
    """Parses what the buffer holds and commits it; one thread at a time."""

    def __init__(self, config: Config, buffer: Buffer, session: LakeSession) -> None:
        self.zones = {zone.id for zone in config.zones}
        self.buffer = buffer
        self.session = session
        self.bookkeeping = Bookkeeping(session)
        self.run_id = uuid.uuid4().hex  # names this receiver's rejects: file syslog:<run_id>
        self._writers: dict[int, ZoneWriter] = {}
        self._waiting: dict[int, pl.DataFrame] = {}  # rows of commits that failed

    def flush(self) -> bool:
        """Commit what was received; False if some zone's rows could not be committed
        (they are kept and tried again at the next flush)."""
        lines = self.buffer.take()
        plain = self._by_zone([line for line in lines if not json_messages.is_json(line.text)])
        decoded = self._decoded([line for line in lines if json_messages.is_json(line.text)])
        zones = set(plain)
        if decoded is not None:
            named = decoded.frame[json_messages.ZONE].unique().drop_nulls()
            zones.update(zone for zone in named if zone in self.zones)
        for zone_id in sorted(zones):
            rows = self._parse(zone_id, plain.get(zone_id, []), decoded)
            if zone_id in self._waiting:
                rows = pl.concat([self._waiting.pop(zone_id), rows])
            if rows.height:
                self._waiting[zone_id] = rows
        ok = self._commit(sorted(self._waiting))
        self.buffer.hold(sum(rows.height for rows in self._waiting.values()))
        return ok

    def _by_zone(self, lines: list[Line]) -> dict[int, list[Line]]:
        """Plain lines by the zone of their field 5 (the others counted)."""
        by_zone: dict[int, list[Line]] = {}
        for line in lines:
            fields = line.text.split("|", 5)
            zone_text = fields[4] if len(fields) > 5 else ""
            digits = zone_text.isascii() and zone_text.isdecimal() and len(zone_text) < 19
            zone_id = int(zone_text) if digits else None
            if zone_id is None:
                self.buffer.drop("not a log line")
            elif zone_id not in self.zones:
                self.buffer.drop("unknown zone")
            else:
                by_zone.setdefault(zone_id, []).append(line)
        return by_zone

    def _decoded(self, lines: list[Line]) -> json_messages.Decoded | None:
        """JSON messages as columns, those of configured zones only (the others counted)."""
        if not lines:
            return None
        decoded = json_messages.decode([line.text for line in lines], [line.seq for line in lines])
        zone = decoded.frame[json_messages.ZONE]
        if nameless := zone.null_count():
            self.buffer.drop("JSON without a pull zone", nameless)
        if unknown := int((~zone.is_in(sorted(self.zones))).sum()):
            self.buffer.drop("unknown zone", unknown)
        return decoded

    def _parse(
        self, zone_id: int, lines: list[Line], decoded: json_messages.Decoded | None
    ) -> pl.DataFrame:
        """The zone's rows, from its plain lines and its JSON messages; their rejects go to
        ``rejected_lines`` (or are counted when that cannot be written)."""
        frames: list[pl.DataFrame] = []
        rejected: list[pl.DataFrame] = []
        if lines:
            data = "".join(line.text + "\n" for line in lines).encode()
            rows, rejects, blank = parse_block(Block(1, data, False), zone_id)
            if blank:  # (message_text refuses blank text; a line of spaces splits to one field)
                self.buffer.drop("not a log line", blank)
            if rejects.height:
                seqs = pl.Series("line_number", [line.seq for line in lines], dtype=pl.Int64)
                rejected.append(rejects.with_columns(seqs.gather(rejects["line_number"] - 1)))
            frames.append(rows)
        if decoded is not None:
            rows, rejects = json_messages.normalize(decoded, zone_id)
            if rejects.height:
                rejected.append(rejects)
            if rows.height:
                frames.append(rows.with_columns(pl.lit(SOURCE).alias("source")).cast(ROWS))
        if rejected:
            self._reject(zone_id, pl.concat(rejected))
        if not frames:
            return pl.DataFrame(schema=ROWS)
        return pl.concat(frames).with_columns(pl.lit(SOURCE).alias("source"))

    def _reject(self, zone_id: int, rejects: pl.DataFrame) -> None:
        try:
            frame = rejects_frame(
                zone_id,
                rejects,
                source=SOURCE,
                file=f"syslog:{self.run_id}",
                rejected_at=utcnow(),
                run_id=self.run_id,
            )
            self.bookkeeping.record_rejects([frame], patient=False)
            self.buffer.counts.rejected += rejects.height
            self.buffer.counts.rejected_by_zone[zone_id] += rejects.height
        except CdnlakeError as exc:
            log.error(
                "zone %s: %d forwarded lines rejected, not stored: %s",
                zone_id,
                rejects.height,
                exc,
            )
            self.buffer.drop("rejected, not stored", rejects.height)

    def _commit(self, zones: list[int]) -> bool:
        """Commit the waiting rows of ``zones`` at once; False where a zone's could not be
        (they stay waiting, tried again at the next flush)."""
        writes: list[tuple[int, ZoneWriter]] = []
        ok = True
        for zone_id in zones:
            try:
                writer = self._writers.get(zone_id)
                if writer is None:
                    writer = self._writers[zone_id] = ZoneWriter(self.session, REQUESTS, zone_id)
                writes.append((zone_id, writer))
            except CdnlakeError as exc:
                ok = False
                self._failed(zone_id, exc)
        outcomes = commit_together([(w, self._waiting[z]) for z, w in writes]) if writes else []
        for (zone_id, _), outcome in zip(writes, outcomes, strict=True):
            rows = self._waiting[zone_id]
            if isinstance(outcome, CdnlakeError):
                ok = False
                self._failed(zone_id, outcome)
                continue
            del self._waiting[zone_id]
            self.buffer.counts.rows += outcome.new
            self.buffer.counts.rows_by_zone[zone_id] += outcome.new
            known = rows.height - outcome.new - outcome.erased  # repeats in rows too
            self.buffer.counts.duplicates += known
            self.buffer.counts.erased += outcome.erased
            log.debug(
                "zone %s: %d forwarded rows committed, %d known, %d held back (erased)",
                zone_id,
                outcome.new,
                known,
                outcome.erased,
            )
        return ok

    def _failed(self, zone_id: int, exc: CdnlakeError) -> None:
        # A fresh writer next time: after a rewind or a new holder (FencedError) it takes
        # the zone's fence token as it is then; forwarded rows carry no progress.
        self._writers.pop(zone_id, None)
        log.error(
            "zone %s: %d forwarded rows not committed yet (tried again at the next flush): %s",
            zone_id,
            self._waiting[zone_id].height,
            exc,
        )
