"""Erasures: what ``cdnlake forget`` removed, kept in ``erasures``, and the filter that keeps
erased rows from coming back.

Every row that enters ``requests`` or ``shield_events`` goes through a zone's writer, where
:class:`ErasureFilter` (the session's) drops the rows an erasure covers: its zone or every
zone, its days, a ``ts`` up to its instant, its request id or address (by keyed hash). It
reads ``erasures`` only when a zone's or the lake's (zone 0's) erasure mark names one it
has not read. It fails closed: an erasure made under a key this process does not hold,
or a mark naming an erasure ``erasures`` lacks (erasures never expire: it was lost),
stops the zone's rows, in one line.

An address erasure's ``filter`` holds keyed hashes separated by spaces
(:mod:`cdnlake.lake.personal.forget`): of the address itself and its other own forms, and
of each network form it looked for. An untagged hash matches an incoming row by its
address as received or as stored, so it holds whatever ``[privacy] ip`` becomes; a
network's hash tagged ``net:`` matches only a row whose address *as received* is that
network (the provider anonymised it): a row stored as the network under a later
``truncate`` is another client's as well. Tagged ``net@7,8:``, it matches rows of zones
7 and 8 as stored too: their privacy marks showed rows stored as that network when the
erasure was made (forget removed everyone in it there: rows up to its instant are
matched as stored). Rows recorded before hold one untagged hash (the stored form) and
match as they did.

A request-id erasure's ``filter`` holds the keyed hash of the lowercased id
(``hmac-sha256:``, with ``key_id``), never the id (it would link to the provider's own
record of the request); an incoming id is hashed to compare. Rows recorded before hold the
id itself and match as they did.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from cdnlake.errors import ConfigError, StorageError
from cdnlake.lake.log.progress import to_ms
from cdnlake.lake.log.schema import ERASURES, REQUESTS, SHIELD_EVENTS, TableSpec
from cdnlake.lake.log.store import Lake
from cdnlake.lake.zone.erasure_key import ErasureKey, KeySource
from cdnlake.privacy import addresses_column, parse_address

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger(__name__)

IP, REQUEST_ID = "ip", "request_id"
EVERY_ZONE = 0  # an erasure's zone when it concerns every zone
# Tags a network form's hash: ``net:<hash>`` is matched by an address as received only;
# ``net@7,8:<hash>`` in zones 7 and 8 by an address as stored too (rows were stored so).
NETWORK = "net"
HASHED = "hmac-sha256:"  # how a keyed hash begins (ErasureKey.digest)


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
    follows: frozenset[int] = frozenset()  # the marks it was recorded after (epoch ms)
    replaces: frozenset[int] = frozenset()  # lost erasures' marks it stands in for

    def concerns(self, zone: int) -> bool:
        return self.zone in (EVERY_ZONE, zone)

    def _tagged(self) -> list[tuple[frozenset[int] | None, str]]:
        """Each hash of the filter with the zones whose rows it matches as stored (None:
        every zone's, untagged; empty: none, matched as received only)."""
        found: list[tuple[frozenset[int] | None, str]] = []
        for text in self.filter.split():
            if not text.startswith(NETWORK):
                found.append((None, text))
                continue
            tag, _, digest = text.partition(":")
            zones = tag.removeprefix(NETWORK).removeprefix("@")
            found.append((frozenset(int(z) for z in zones.split(",") if z), digest))
        return found

    def hashes(self, zone: int | None = None) -> frozenset[str]:
        """An address erasure's hashes matched by an address as received or as stored in
        ``zone``'s rows (see the module docstring)."""
        return frozenset(
            digest
            for zones, digest in self._tagged()
            if zones is None or (zone is not None and zone in zones)
        )

    @property
    def networks(self) -> frozenset[str]:
        """An address erasure's network hashes (tag removed): matched by an address as
        received in every zone."""
        return frozenset(digest for zones, digest in self._tagged() if zones is not None)

    @property
    def keyed(self) -> bool:
        """Whether matching it needs its key: an address's, or a request id's recorded
        as a keyed hash (one recorded before holds the id itself)."""
        return self.kind == IP or self.filter.startswith(HASHED)


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
        follows=_instants(row.get("follows")),
        replaces=_instants(row.get("replaces")),
    )


def _instants(text: str | None) -> frozenset[int]:
    return frozenset(int(m) for m in (text or "").split(",") if m)


def instants_text(instants: frozenset[int]) -> str | None:
    """Erasure marks as ``erasures`` keeps them (``follows``, ``replaces``)."""
    return ",".join(str(m) for m in sorted(instants)) or None


def _followed(erasures: list[Erasure]) -> set[int]:
    return {m for e in erasures for m in e.follows}


def lost_names(marks: list[int]) -> str:
    """Lost erasures as their marks name them: the instant of each one's id."""
    return ", ".join(
        f"erasure-{datetime.fromtimestamp(m / 1000, tz=UTC):%Y%m%dT%H%M%SZ}-..."
        for m in sorted(marks)
    )


def recorded_instants(erasures: list[Erasure]) -> set[int]:
    """The marks these erasures answer for: their own instants, and those of the lost
    erasures they were recorded in place of."""
    return {to_ms(e.erased_at) for e in erasures} | {m for e in erasures for m in e.replaces}


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
        stored, where ``erasures`` holds none of a mark's instant, nor of one an erasure
        it holds was recorded after (``follows``): erasures never expire, so it was lost
        (a mark naming it is read for again at the next call)."""
        named = {m for m in (mark, lake_mark) if m}
        if not named:
            return []
        with self._lock:
            # read again while one is unknown: a forget --replaces-lost may have come since
            if (named | _followed(self._erasures)) - self._known:
                self._erasures = read_erasures(self.lake)
                self._known |= recorded_instants(self._erasures)
            found = list(self._erasures)
            lost = sorted((named | _followed(found)) - self._known)
        if lost:
            whose = (
                "the lake's erasure mark"
                if lost[0] == lake_mark
                else "its erasure mark"
                if lost[0] == mark
                else "a later erasure"
            )
            raise StorageError(
                f"zone {zone}'s rows are not stored: {whose} names erasures the relation "
                f"erasures does not hold (lost): {lost_names(lost)}; which rows they cover "
                "is unknown: run each such `cdnlake forget` again with --replaces-lost"
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
        held before it is scrubbed) less those whose request id was erased (the column, or
        a token of the raw text), or whose raw text holds an erased address (by the keyed
        hash of each address-looking token, as received and as stored: a network's tagged
        hash by the token as received only): an erased request read again, whatever its
        time (a rejected line has none to go by), is not kept again. A line without a
        ``source`` is held against the erasures of its zone's pull and shield zone alike."""
        import polars as pl

        if frame.height == 0:
            return frame
        wanted: dict[tuple[int, bool], list[Erasure]] = {}
        lake_mark = self.lake_mark()
        shield = frame["source"] == "shield"
        sides = {False: (~shield).fill_null(True), True: shield.fill_null(True)}
        for spec, is_shield in ((REQUESTS, False), (SHIELD_EVENTS, True)):
            zones = [int(z) for z in frame.filter(sides[is_shield])["zone"].unique()]
            if not zones:
                continue
            for zone, mark in self.marks(spec, zones).items():
                wanted[(zone, is_shield)] = self.concerning(zone, mark, lake_mark)
        if not any(wanted.values()):
            return frame
        every = [e for erasures in wanted.values() for e in erasures]
        found = addresses_column(frame["raw_line"])
        tokens = found.explode().drop_nulls().unique().to_list()
        hashes = self._address_hashes(tokens, every, zone=None, as_stored=True)
        ids = _id_tokens(frame)
        digests = self._id_hashes(ids.explode().drop_nulls().unique(), every, zone=None)
        covered = pl.Series([False] * frame.height, dtype=pl.Boolean)
        for (zone, is_shield), erasures in wanted.items():
            mine = (frame["zone"] == zone) & sides[is_shield]
            for erasure in erasures:
                if erasure.kind == REQUEST_ID:
                    if erasure.keyed:
                        wanted_ids = [i for i, h in digests.items() if erasure.filter in h]
                        hit = ids.list.eval(pl.element().is_in(wanted_ids)).list.any()
                    else:  # recorded before: the id itself
                        hit = same_id(frame["request_id"], erasure.filter) | frame[
                            "raw_line"
                        ].str.contains(request_id_in_text(erasure.filter))
                else:
                    where = None if is_shield else zone  # the tags name pull zones
                    addresses = _matching(hashes, erasure, where, received=True)
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
        free text an address erasure is held against) the ``erasures`` cover. ``received``
        (None: the rows are as received) matches a network's tagged hash; the rows as
        stored, the untagged ones only. ``zone``: the zone whose rows these are, named
        where an erasure cannot be matched."""
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
        digests: dict[str, set[str]] = {}
        by_hash = [e for e in erasures if e.kind == REQUEST_ID and e.keyed]
        if by_hash:  # only rows up to the latest such erasure can be one: fewer to hash
            until = max(e.erased_at for e in by_hash)
            candidates = frame.filter(pl.col("ts") <= until)["request_id"].str.to_lowercase()
            digests = self._id_hashes(candidates.drop_nulls().unique(), by_hash, zone=zone)
        covered = pl.Series([False] * frame.height, dtype=pl.Boolean)
        for erasure in erasures:
            if erasure.kind == REQUEST_ID:
                if erasure.keyed:
                    wanted_ids = [i for i, h in digests.items() if erasure.filter in h]
                    hit = frame["request_id"].str.to_lowercase().is_in(wanted_ids)
                else:  # recorded before: the id itself
                    hit = same_id(frame["request_id"], erasure.filter)
            else:
                where = zone if spec is REQUESTS else None  # the tags name pull zones
                as_stored = _matching(hashes, erasure, where, received=received is None)
                as_received = _matching(hashes, erasure, where, received=True)
                if not as_stored and not as_received:
                    continue
                if spec is SHIELD_EVENTS:
                    hit = found.list.eval(pl.element().is_in(as_stored)).list.any()
                    if heard is not None and received is not None:  # by its text as received
                        was = heard.list.eval(pl.element().is_in(as_received)).list.any()
                        key = received.columns[0]
                        heard_ids = received.filter(was.fill_null(False))[key]
                        hit = hit | frame[key].is_in(heard_ids.implode())
                else:
                    hit = found.is_in(as_stored)
                    if received is not None:  # by the address as received
                        ids = received.filter(pl.col("remote_ip").is_in(as_received))
                        hit = hit | frame["request_id"].is_in(ids["request_id"].implode())
            hit = hit.fill_null(False) & (frame["ts"] <= erasure.erased_at)
            if erasure.from_day is not None:
                hit = hit & (frame["date"] >= erasure.from_day)
            if erasure.to_day is not None:
                hit = hit & (frame["date"] <= erasure.to_day)
            covered = covered | hit.fill_null(False)
        return covered

    def _keys(self, erasures: list[Erasure], *, zone: int | None) -> list[ErasureKey]:
        """The keys the keyed ``erasures`` were made under. ConfigError, the rows not to
        be stored, where this process holds no such key: it cannot tell whether they
        were erased."""
        keyed = [e for e in erasures if e.keyed]
        if not keyed:
            return []
        keys = {key.key_id: key for key in self.keys.every()}
        foreign = [e for e in keyed if e.key_id not in keys]
        if foreign:
            first = foreign[0]
            whose = f"zone {zone}'s rows" if zone is not None else "these rejected lines"
            raise ConfigError(
                f"privacy.hash_key_env: erasure {first.erasure_id} was made under a key "
                f"this process does not hold (key id {first.key_id}), so {whose} are not "
                "stored: set privacy.hash_key_env to the key forget used (or run where "
                f"{self.keys.file} is)"
            )
        return [keys[key_id] for key_id in sorted({e.key_id for e in keyed if e.key_id})]

    def _address_hashes(
        self,
        addresses: list[str],
        erasures: list[Erasure],
        *,
        zone: int | None,
        as_stored: bool = False,
    ) -> dict[str, tuple[set[str], set[str]]]:
        """Each of ``addresses`` with its keyed hashes under each key an address erasure
        concerning them was made under: of the address itself, and (``as_stored``: raw
        text is held before it is scrubbed) of the address as the privacy policy stores
        it. ConfigError as :meth:`_keys`."""
        used = self._keys([e for e in erasures if e.kind == IP], zone=zone)
        if not used:
            return {}
        hashes: dict[str, tuple[set[str], set[str]]] = {}
        for address in addresses:
            itself = canonical(address)
            stored = self.stored(itself) if as_stored else None
            treated = {key.digest(canonical(stored)) for key in used} if stored else set()
            hashes[address] = ({key.digest(itself) for key in used}, treated)
        return hashes

    def _id_hashes(
        self, ids: pl.Series, erasures: list[Erasure], *, zone: int | None
    ) -> dict[str, set[str]]:
        """Each of ``ids`` (lowercased, distinct) with its keyed hashes under each key a
        request-id erasure recorded as a hash was made under. ConfigError as :meth:`_keys`."""
        used = self._keys([e for e in erasures if e.kind == REQUEST_ID], zone=zone)
        if not used:
            return {}
        return {i: {key.digest(i) for key in used} for i in ids.to_list()}


def _matching(
    hashes: dict[str, tuple[set[str], set[str]]],
    erasure: Erasure,
    zone: int | None,
    *,
    received: bool,
) -> list[str]:
    """The addresses of ``hashes`` (of ``zone``'s rows) ``erasure`` covers: by a hash that
    matches as stored there, of the address or its stored form; ``received`` (the
    addresses are as received), by a network's hash of the address itself too."""
    own, networks = erasure.hashes(zone), erasure.networks
    return [
        address
        for address, (itself, stored) in hashes.items()
        if (itself | stored) & own or (received and itself & networks)
    ]


def _id_tokens(frame: pl.DataFrame) -> pl.Series:
    """Each rejected line's request-id-like tokens, lowercased: its ``request_id`` and each
    whole run of 32 hexadecimal characters in its raw text."""
    import polars as pl

    hexadecimal = rf"^{REQUEST_ID_FORM}$"
    tokens = pl.concat_list(
        pl.col("raw_line").fill_null("").str.extract_all(r"[0-9A-Za-z]+"),
        pl.col("request_id").fill_null(""),
    )
    wanted = pl.element().filter(pl.element().str.contains(hexadecimal)).str.to_lowercase()
    return frame.select(tokens.list.eval(wanted).alias("ids")).to_series()
