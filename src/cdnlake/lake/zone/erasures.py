"""Erasures: what ``cdnlake forget`` removed, kept in ``erasures``, and the filter that keeps
erased rows from coming back.

Every row that enters ``requests`` or ``shield_events`` goes through a zone's writer, where
:class:`ErasureFilter` (the session's) drops the rows an erasure covers: its zone or every
zone, its days, a ``ts`` up to its instant, its request id or address (by keyed hash). It
reads ``erasures`` only when a zone's or the lake's (zone 0's) erasure mark names one it
has not read. It fails closed: an erasure made under a key this process does not hold,
or a mark naming an erasure ``erasures`` lacks (erasures never expire: it was lost),
stops the zone's rows, in one line.

An address erasure's ``filter`` holds keyed hashes separated by spaces: of the address as
received and of each form the zone's data stored it in (:mod:`cdnlake.lake.personal.forget`),
so that it holds whatever ``[privacy] ip`` becomes; an incoming row matches by its
address as received or as stored. Rows recorded before hold one hash: the stored form.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from cdnlake.errors import ConfigError, StorageError
from cdnlake.lake.log.schema import ERASURES, REQUESTS, SHIELD_EVENTS, TableSpec
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.erasure_key import KeySource
from cdnlake.privacy import addresses_column, parse_address

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger(__name__)

IP, REQUEST_ID = "ip", "request_id"
EVERY_ZONE = 0  # an erasure's zone when it concerns every zone


# The provider's request ids: 32 hexadecimal characters (logging API, field 11).
REQUEST_ID_FORM = r"[0-9A-Fa-f]{32}"


def request_id_in_text(request_id: str) -> str:
    """A pattern finding ``request_id`` in raw text as a whole token, in any case (never
    inside a longer run of letters and digits)."""
    import re

    return rf"(?i)(?:^|[^0-9A-Za-z]){re.escape(request_id)}(?:$|[^0-9A-Za-z])"


def same_id(ids: pl.Series, request_id: str) -> pl.Series:
    """Which of ``ids`` are ``request_id``, in any case (hexadecimal: a source may write
    it in capitals; ``forget`` records it in small letters)."""
    return ids.str.to_lowercase() == request_id.strip().lower()


def canonical(address: str) -> str:
    """An address in one spelling (``2001:DB8:0::1`` and ``2001:db8::1`` alike, an
    IPv4-mapped ``::ffff:1.2.3.4`` as ``1.2.3.4``, as :func:`cdnlake.privacy.parse_address`
    reads it), so that its keyed hash is the same however a source wrote it; text that is
    no address, as is."""
    parsed = parse_address(address)
    return address if parsed is None else parsed.compressed


@dataclass(frozen=True)
class Erasure:
    """One row of ``erasures``: what it matches, where, and up to when."""

    erasure_id: str
    zone: int
    erased_at: datetime
    kind: str  # IP or REQUEST_ID
    filter: str
    key_id: str | None = None
    from_day: date | None = None
    to_day: date | None = None

    def concerns(self, zone: int) -> bool:
        return self.zone in (EVERY_ZONE, zone)

    @property
    def hashes(self) -> frozenset[str]:
        """An address erasure's keyed hashes (see the module docstring)."""
        return frozenset(self.filter.split())


def from_row(row: dict[str, Any]) -> Erasure:
    at = row["erased_at"]
    return Erasure(
        erasure_id=row["erasure_id"],
        zone=int(row["zone"]),
        erased_at=at if at.tzinfo else at.replace(tzinfo=UTC),
        kind=row["kind"],
        filter=row["filter"],
        key_id=row.get("key_id"),
        from_day=row.get("from_day"),
        to_day=row.get("to_day"),
    )


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def read_erasures(lake: Lake) -> list[Erasure]:
    """Every erasure the lake records."""
    table = lake.open(ERASURES)
    if table is None:
        return []
    try:
        rows = lake.dataset(ERASURES, table).to_table().to_pylist()
    except OSError as exc:
        raise StorageError(f"cannot read erasures: {exc}") from None
    return [from_row(row) for row in rows]


class ErasureFilter:
    """A session's erasures, read when a zone's erasure mark says there are new ones, and
    the rows of a commit they cover, dropped (see the module docstring)."""

    def __init__(
        self,
        lake: Lake,
        keys: KeySource,
        marks: Callable[[TableSpec, list[int]], dict[int, int | None]] = lambda s, zones: {},
        stored: Callable[[str], str | None] = lambda address: address,
    ) -> None:
        """``marks``: the erasure marks of a table's zones as the table has it now (the
        lake's is zone 0's in ``requests``). ``stored``: an address as the privacy policy
        stores it (a raw line's address is held against the erasures both as received
        and so)."""
        self.lake = lake
        self.keys = keys
        self.marks = marks
        self.stored = stored
        self._lock = threading.Lock()
        self._erasures: list[Erasure] = []
        # The instants (epoch ms) of the erasures read: a mark naming one of them is not
        # read for again. A mark is matched by value, not compared: clocks of machines differ.
        self._known: set[int] = set()

    def lake_mark(self) -> int | None:
        """The lake's erasure mark (zone 0's in ``requests``) as the table has it now."""
        return self.marks(REQUESTS, [EVERY_ZONE]).get(EVERY_ZONE)

    def concerning(self, zone: int, mark: int | None, lake_mark: int | None) -> list[Erasure]:
        """The erasures that concern ``zone``, whose own erasure mark is ``mark``: those
        of the zone and those of every zone (by the lake's mark, ``lake_mark``); read
        again when a mark names one not read yet. StorageError, the zone's rows not to be
        stored, where ``erasures`` holds none of a mark's instant: erasures never expire,
        so it was lost (a mark naming it is read for again at the next call)."""
        named = {m for m in (mark, lake_mark) if m}
        if not named:
            return []
        with self._lock:
            if named - self._known:
                self._erasures = read_erasures(self.lake)
                self._known |= {_ms(e.erased_at) for e in self._erasures}
            found = list(self._erasures)
            lost = min(named - self._known, default=None)
        if lost is not None:
            whose = "the lake's erasure mark" if lost == lake_mark else "its erasure mark"
            at = datetime.fromtimestamp(lost / 1000, tz=UTC)
            raise StorageError(
                f"zone {zone}'s rows are not stored: {whose} names an erasure (id "
                f"erasure-{at:%Y%m%dT%H%M%SZ}-...) that the relation erasures does not hold "
                "(lost, e.g. to a power loss), so which rows it covers is unknown: run that "
                "`cdnlake forget` again, which records it anew"
            )
        return [e for e in found if e.concerns(zone)]

    def kept(
        self,
        spec: TableSpec,
        zone: int,
        frame: pl.DataFrame,
        mark: int | None,
        received: pl.DataFrame | None = None,
        *,
        lake_mark: int | None,
    ) -> pl.DataFrame:
        """``frame`` (rows as the table stores them) less the rows an erasure covers
        (``received``: the rows' ``request_id`` and ``remote_ip`` as received, where they
        are stored otherwise; an erasure made under an earlier setting matches those).
        ``lake_mark``: the lake's erasure mark, read by the caller, whose share carries it
        (a share held against an older one goes back: :mod:`cdnlake.lake.log.table`)."""
        if spec not in (REQUESTS, SHIELD_EVENTS) or frame.height == 0:
            return frame
        wanted = self.concerning(zone, mark, lake_mark)
        if not wanted:
            return frame
        covered = self.covered(frame, wanted, spec, received, zone=zone)
        dropped = int(covered.sum())
        if dropped:
            log.info("zone %s: %d row(s) an erasure covers were not stored", zone, dropped)
            return frame.filter(~covered)
        return frame

    def kept_rejects(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``rejected_lines`` rows (of pull and shield zones, their raw text as received:
        held before it is scrubbed) less those whose request id was erased, or whose raw
        text holds an erased address (by the keyed hash of each address-looking token,
        as received and as stored): an erased request read again, whatever its time (a
        rejected line has none to go by), is not kept again."""
        import polars as pl

        if frame.height == 0:
            return frame
        wanted: dict[tuple[int, bool], list[Erasure]] = {}
        lake_mark = self.lake_mark()
        shield = frame["source"] == "shield"
        for spec, is_shield in ((REQUESTS, False), (SHIELD_EVENTS, True)):
            zones = [int(z) for z in frame.filter(shield == is_shield)["zone"].unique()]
            if not zones:
                continue
            for zone, mark in self.marks(spec, zones).items():
                wanted[(zone, is_shield)] = self.concerning(zone, mark, lake_mark)
        if not any(wanted.values()):
            return frame
        found = addresses_column(frame["raw_line"])
        every = [e for erasures in wanted.values() for e in erasures if e.kind == IP]
        tokens = found.explode().drop_nulls().unique().to_list()
        hashes = self._address_hashes(tokens, every, zone=None, as_stored=True)
        covered = pl.Series([False] * frame.height, dtype=pl.Boolean)
        for (zone, is_shield), erasures in wanted.items():
            mine = (frame["zone"] == zone) & (shield == is_shield)
            for erasure in erasures:
                if erasure.kind == REQUEST_ID:
                    hit = same_id(frame["request_id"], erasure.filter) | frame[
                        "raw_line"
                    ].str.contains(request_id_in_text(erasure.filter))
                else:
                    wanted_hashes = erasure.hashes
                    addresses = [a for a, h in hashes.items() if wanted_hashes & h]
                    if not addresses:
                        continue
                    hit = found.list.eval(pl.element().is_in(addresses)).list.any()
                covered = covered | (mine & hit.fill_null(False))
        dropped = int(covered.sum())
        if dropped:
            log.info("%d rejected line(s) an erasure covers were not kept", dropped)
        return frame.filter(~covered)

    def covered(
        self,
        frame: pl.DataFrame,
        erasures: list[Erasure],
        spec: TableSpec = REQUESTS,
        received: pl.DataFrame | None = None,
        *,
        zone: int | None = None,
    ) -> pl.Series:
        """Which rows of ``frame`` (``requests`` rows, or ``shield_events`` rows, whose
        free text an address erasure is held against) the ``erasures`` cover. ``zone``:
        the zone whose rows these are, named where an erasure cannot be matched."""
        import polars as pl

        if spec is SHIELD_EVENTS:
            erasures = [e for e in erasures if e.kind == IP]
            text = pl.concat_str(
                [pl.col("log"), pl.col("labels_json")], separator=" ", ignore_nulls=True
            )
            found = addresses_column(frame.select(text).to_series())
        else:
            found = frame["remote_ip"]
        distinct = found.explode() if spec is SHIELD_EVENTS else found
        if received is not None and spec is REQUESTS:
            distinct = pl.concat([distinct, received["remote_ip"]])
        heard = None  # a shield event's addresses as received (its text before treatment)
        if received is not None and spec is SHIELD_EVENTS:
            heard = addresses_column(received["text"])
            distinct = pl.concat([distinct, heard.explode()])
        hashes = self._address_hashes(
            distinct.drop_nulls().unique().to_list(),
            [e for e in erasures if e.kind == IP],
            zone=zone,
            as_stored=spec is SHIELD_EVENTS,
        )
        covered = pl.Series([False] * frame.height, dtype=pl.Boolean)
        for erasure in erasures:
            if erasure.kind == REQUEST_ID:
                hit = same_id(frame["request_id"], erasure.filter)
            else:
                wanted_hashes = erasure.hashes
                addresses = [a for a, h in hashes.items() if wanted_hashes & h]
                if not addresses:
                    continue
                if spec is SHIELD_EVENTS:
                    hit = found.list.eval(pl.element().is_in(addresses)).list.any()
                    if heard is not None and received is not None:  # by its text as received
                        was = heard.list.eval(pl.element().is_in(addresses)).list.any()
                        key = received.columns[0]
                        heard_ids = received.filter(was.fill_null(False))[key]
                        hit = hit | frame[key].is_in(heard_ids.implode())
                else:
                    hit = found.is_in(addresses)
                    if received is not None:  # by the address as received
                        ids = received.filter(pl.col("remote_ip").is_in(addresses))
                        hit = hit | frame["request_id"].is_in(ids["request_id"].implode())
            hit = hit.fill_null(False) & (frame["ts"] <= erasure.erased_at)
            if erasure.from_day is not None:
                hit = hit & (frame["date"] >= erasure.from_day)
            if erasure.to_day is not None:
                hit = hit & (frame["date"] <= erasure.to_day)
            covered = covered | hit.fill_null(False)
        return covered

    def _address_hashes(
        self,
        addresses: list[str],
        erasures: list[Erasure],
        *,
        zone: int | None,
        as_stored: bool = False,
    ) -> dict[str, set[str]]:
        """Each of ``addresses`` with its keyed hashes under each key an address erasure
        concerning them was made under (``as_stored``: of the address as the privacy
        policy stores it too: raw text is held before it is scrubbed). ConfigError, the
        rows not to be stored, where this process holds no such key: it cannot tell
        whether they were erased."""
        if not erasures:
            return {}
        keys = {key.key_id: key for key in self.keys.every()}
        foreign = [e for e in erasures if e.key_id not in keys]
        if foreign:
            first = foreign[0]
            whose = f"zone {zone}'s rows" if zone is not None else "these rejected lines"
            raise ConfigError(
                f"privacy.hash_key_env: erasure {first.erasure_id} was made under a key "
                f"this process does not hold (key id {first.key_id}), so {whose} are not "
                "stored: set privacy.hash_key_env to the key forget used (or run where "
                f"{self.keys.file} is)"
            )
        used = [keys[key_id] for key_id in sorted({e.key_id for e in erasures if e.key_id})]
        hashes: dict[str, set[str]] = {}
        for address in addresses:
            forms = {canonical(address)}
            if as_stored:
                stored = self.stored(forms.copy().pop())
                if stored:
                    forms.add(canonical(stored))
            hashes[address] = {key.digest(form) for key in used for form in forms}
        return hashes
