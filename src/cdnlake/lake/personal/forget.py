"""``cdnlake forget``: one client's rows (an address) or one request removed from the lake.

In this order, so that whatever is killed midway, the erasure is never lost:

1. the erasure is recorded in ``erasures`` (the address as a keyed hash, never itself),
   and, made without ``--zone``, the lake's erasure mark is committed (zone 0's in
   ``requests``): from then on every zone, those configured later too, holds its rows
   against it;
2. each zone concerned is rewritten (:mod:`cdnlake.lake.upkeep.rewrite`): the files holding
   matching rows are replaced by files without them, in one fenced commit of the zone
   that also carries the zone's erasure mark, so every writer of the zone, in this process
   or another, holds its next rows against the erasure (:mod:`cdnlake.lake.zone.erasures`);
   ``shield_events`` whose text holds the address likewise;
3. the rows of ``rejected_lines`` whose raw text holds the address or the request id go
   (a delete on the session's table);
4. the erasure's row gets its counts, the requests removed per zone and hour among them
   (``hours_removed``), so that the audit explains an hour short by them: each zone's as
   its rewrite lands (stopped midway, what was removed stays counted), with the keyed
   hashes of the removed requests' ids in ``erased_requests`` (a pass reading them again
   then does not count them as held back a second time);
5. with ``vacuum_now``, the removed files leave storage at once (a vacuum with no
   retention of those tables; its caller holds every other writer off meanwhile); else
   at the first vacuum past ``[retention] vacuum_hours``.

An address is looked for in every form the zone's data may hold it in (:func:`forms`):
as received, its network (``truncate``), the keyed hash of either (``hash``, also after
``maintain --apply-privacy`` hashed what was truncated); the report says which matched.

Running it again is harmless: it finds nothing more to remove, and records another row.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from cdnlake.errors import (
    ConfigError,
    StopRequested,
    StorageError,
    UsageError,
    ZoneBusyError,
    first_line,
)
from cdnlake.lake.log.progress import ERASED, PRIVACY, PRIVACY_BEFORE, to_ms
from cdnlake.lake.log.schema import (
    ERASURES,
    REJECTED_LINES,
    REQUESTS,
    SHIELD_EVENTS,
    TableSpec,
    polars_schema,
)
from cdnlake.lake.log.store import add_actions_table
from cdnlake.lake.log.table import Merge
from cdnlake.lake.upkeep.maintain import HOLD_WAIT_SECONDS, vacuum_removed
from cdnlake.lake.upkeep.rewrite import Rewriter, rewrite
from cdnlake.lake.zone.bookkeeping import Bookkeeping
from cdnlake.lake.zone.erasures import (
    EVERY_ZONE,
    IP,
    NETWORK,
    REQUEST_ID,
    REQUEST_ID_FORM,
    Erasure,
    canonical,
    instants_text,
    read_erasures,
    recorded_instants,
    request_id_in_text,
    same_id,
)
from cdnlake.lake.zone.lock import zone_lock
from cdnlake.lake.zone.session import LakeSession
from cdnlake.privacy import PrivacyPolicy, Setting, addresses_column, parse_address

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """What to forget: an address (``ip``) or a request id, where, and on which days."""

    ip: str | None = None
    request_id: str | None = None
    zones: tuple[int, ...] = ()  # () = every zone
    from_day: date | None = None
    to_day: date | None = None

    def __post_init__(self) -> None:
        if (self.ip is None) == (self.request_id is None):
            raise UsageError("forget: give one of --ip ADDR or --request-id ID")
        if self.ip is not None and parse_address(self.ip) is None:
            raise UsageError(
                "forget --ip: not an IPv4 or IPv6 address (give one address, e.g. "
                "192.0.2.10 or 2001:db8::10)"
            )
        if self.request_id is not None and not re.fullmatch(
            REQUEST_ID_FORM, self.request_id.strip()
        ):
            raise UsageError(
                "forget --request-id: not a request id of the provider (32 hexadecimal "
                "characters, e.g. 322b688bd63fb63f2babe9de30a5d262)"
            )
        if self.from_day and self.to_day and self.from_day > self.to_day:
            raise UsageError("forget: --from is after --to")

    def covers(self, day: date | None) -> bool:
        if day is None:
            return True
        return (self.from_day is None or day >= self.from_day) and (
            self.to_day is None or day <= self.to_day
        )


@dataclass(frozen=True)
class Form:
    """One form an address may be stored in: what the report calls it, its text as
    stored, and the network it stands for (a truncated form, or the hash of one)."""

    label: str
    text: str
    network: str | None = None  # e.g. "11.57.65.0/24"
    hashed_under: int | None = None  # a keyed hash's: the key id privacy marks name

    def stored_by(self, settings: Sequence[Setting]) -> bool:
        """Whether rows stored under one of ``settings`` hold this network form: everyone
        in the network (``truncate`` to its prefix, or ``hash`` of what it truncated)."""
        if self.network is None:
            return False
        network = ipaddress.ip_network(self.network)
        for setting in settings:
            bits = setting.ipv4_prefix if network.version == 4 else setting.ipv6_prefix
            if bits != network.prefixlen:
                continue
            if self.hashed_under is None and setting.ip == "truncate":
                return True
            hashed = setting.ip == "hash" and setting.holds_networks
            if hashed and setting.key_id == self.hashed_under:
                return True
        return False


@dataclass
class ForgetReport:
    erasure_id: str
    erased_at: datetime
    requests: dict[int, int] = field(default_factory=dict)  # zone: rows removed
    days: set[date] = field(default_factory=set)
    shield: int = 0
    rejected: int = 0
    files: int = 0  # data files rewritten or removed
    vacuumed: bool = False
    # Damaged files set aside in _quarantine/ for the zones concerned: not searched (they
    # do not decode); `maintain --restore` puts back those that do, without erased rows.
    quarantined: int = 0
    matched: set[str] = field(default_factory=set)  # the labels of the forms that matched
    networks: set[str] = field(default_factory=set)  # networks rows held (everyone in them)
    # The networks the erasure holds back: every request stored as one in the zones whose
    # rows were stored so, and those received as one (anonymised by the provider).
    held_as_stored: dict[str, set[int]] = field(default_factory=dict)
    held_as_received: set[str] = field(default_factory=set)
    hours: dict[int, dict[str, int]] = field(default_factory=dict)  # zone: hour: removed
    lost: frozenset[int] = frozenset()  # marks naming an erasure ``erasures`` lost

    @property
    def rows(self) -> int:
        return sum(self.requests.values()) + self.shield + self.rejected


def record(session: LakeSession, rows: list[dict[str, Any]]) -> None:
    """Erasure rows (each with its ``zone``), MERGEd on (zone, ``erasure_id``): recorded
    again, a row is updated (its counts, once the rewrite is done)."""
    frame = pl.DataFrame(rows, schema=polars_schema(ERASURES.schema))
    zones = sorted({int(row["zone"]) for row in rows})
    columns = [c for c in ERASURES.columns if c != "erasure_id"]
    merge = Merge(
        lambda: frame,
        "t.erasure_id = s.erasure_id",
        zones,
        update={c: f"s.{c}" for c in columns},
    )
    session.merge_table(ERASURES).committer.run(merge, patient=False)


def forget(
    session: LakeSession,
    target: Target,
    now: datetime,
    *,
    stored: Callable[[str], str | None] = lambda address: address,
    vacuum_now: bool = False,
    stop: Callable[[], bool] = lambda: False,
    zones_known: tuple[int, ...] = (),
    shield_zones_known: tuple[int, ...] = (),
    locks: Path | None = None,
    replaces_lost: bool = False,
) -> ForgetReport:
    """Remove what ``target`` matches (see the module docstring). ``stored``: the address
    as ``[privacy] ip`` stores it (None where addresses are dropped). ``stop``: checked
    between zones; when it turns true, :class:`StopRequested` (the erasure is recorded,
    the zones done so far are whole; running it again finishes). ``zones_known``,
    ``shield_zones_known``: the configured pull and shield zones; those concerned that
    hold no rows yet get the erasure mark too, so that their first pass (reading the span
    the provider still serves) drops the rows. ``locks``: the folder of this machine's
    zone locks: each zone is rewritten holding its lock, so that a pass committing every
    few seconds cannot keep it busy; its pass in flight is waited for, up to
    ``HOLD_WAIT_SECONDS`` (None: the caller holds every zone already). ``replaces_lost``:
    the erasure stands in for those the marks name and ``erasures`` lost (the operator
    ran again what they recorded), so their marks stop no zone's rows any more."""
    erasure = _erasure(session, target, now)
    report = ForgetReport(erasure.erasure_id, now)
    zones = list(target.zones) or None
    scope = sorted(set(_zones_of(session, REQUESTS, zones)) | _concerned(target, zones_known))
    # may refuse: nothing done
    erasure, variants = _variants(session, erasure, target, scope, report)
    # The marks it comes after: an erasure lost before it is then noticed by every
    # process; with replaces_lost, those naming no erasure recorded it stands in for.
    marks = [*session.log_table(REQUESTS).marks([EVERY_ZONE, *scope], ERASED).values()]
    if target.ip is not None:  # shield zones hold marks of address erasures too
        shields = set(_zones_of(session, SHIELD_EVENTS, zones))
        shields |= _concerned(target, shield_zones_known)
        if shields:
            marks += session.log_table(SHIELD_EVENTS).marks(sorted(shields), ERASED).values()
    named = frozenset(m for m in marks if m)
    held = read_erasures(session.lake)
    report.lost = (named | {m for e in held for m in e.follows}) - recorded_instants(held)
    erasure = replace(
        erasure,
        follows=named - report.lost if replaces_lost else named,
        replaces=report.lost if replaces_lost else frozenset(),
    )
    record(session, _rows(erasure, target, report))  # first: never lost
    mark = {ERASED: to_ms(now)}
    if not target.zones:  # every zone's, those configured later too
        rewrite(lambda: Rewriter(session, REQUESTS, EVERY_ZONE, chooses=lambda _: False), mark)

    days = _days(target)
    for zone in scope:
        if stop():
            raise StopRequested()
        gone: dict[str, datetime] = {}  # request id: when (of every attempt: the same rows)

        def make(zone: int = zone, gone: dict[str, datetime] = gone) -> Rewriter:
            return Rewriter(
                session,
                REQUESTS,
                zone,
                chooses=target.covers,
                match=lambda rows: _match(session, rows, variants, report, gone, zone),
                days=days,
            )

        with _holding(locks, REQUESTS, zone, stop):
            written = rewrite(make, mark)
        if written.removed:
            report.requests[zone] = written.removed
            report.files += written.files_removed
            report.days |= written.days_removed
            report.hours[zone] = _per_hour(gone.values())
            # Counted as the zone's rewrite lands: stopped later, none is lost to the audit
            # (and a later pass reading them again does not count them twice).
            removed = pl.DataFrame(
                {"request_id": list(gone), "ts": list(gone.values())},
                schema={"request_id": pl.String, "ts": pl.Datetime("us", "UTC")},
            )
            Bookkeeping(session).record_erased(zone, removed, "removed")
            record(session, _rows(erasure, target, report))

    traces = None
    if target.ip is not None:
        traces = _traces(target.ip, stored, [form.text for form, _ in variants if form])
        shield_scope = set(_zones_of(session, SHIELD_EVENTS, zones))
        for zone in sorted(shield_scope | _concerned(target, shield_zones_known)):
            if stop():
                raise StopRequested()

            def shield(zone: int = zone) -> Rewriter:
                return Rewriter(
                    session,
                    SHIELD_EVENTS,
                    zone,
                    chooses=target.covers,
                    match=lambda rows: traces.found(rows, ("log", "labels_json")),
                    days=days,
                )

            with _holding(locks, SHIELD_EVENTS, zone, stop):
                written = rewrite(shield, mark)  # the mark: its writers hold rows against it
            report.shield += written.removed
            report.files += written.files_removed
            report.days |= written.days_removed
    report.rejected = _forget_rejects(session, target, traces, zones)
    report.quarantined = _quarantined(session, zones)

    record(session, _rows(erasure, target, report))  # with its counts
    if vacuum_now:
        vacuum_removed(session, [REQUESTS, SHIELD_EVENTS, REJECTED_LINES])
        report.vacuumed = True
        record(session, _rows(erasure, target, report))
    log.info(
        "erasure %s: %d row(s) removed (%d request(s), %d shield event(s), %d rejected line(s))",
        erasure.erasure_id,
        report.rows,
        sum(report.requests.values()),
        report.shield,
        report.rejected,
    )
    return report


@contextlib.contextmanager
def _holding(
    locks: Path | None, spec: TableSpec, zone: int, stop: Callable[[], bool]
) -> Iterator[None]:
    """The zone's lock on this machine, its pass in flight waited for (Ctrl-C obeyed);
    ZoneBusyError past ``HOLD_WAIT_SECONDS``, the erasure recorded and the zones before
    this one done."""
    with contextlib.ExitStack() as held:
        if locks is not None:
            try:
                held.enter_context(
                    zone_lock(locks, spec.name, zone, wait=HOLD_WAIT_SECONDS, stop=stop)
                )
            except ZoneBusyError as exc:
                raise ZoneBusyError(
                    f"forget: {exc} still after {HOLD_WAIT_SECONDS:.0f} s; the erasure is "
                    "recorded and the zones before it are done: run the same forget again"
                ) from None
        yield


def _match(
    session: LakeSession,
    rows: pl.DataFrame,
    variants: list[tuple[Form | None, Erasure]],
    report: ForgetReport,
    gone: dict[str, datetime],
    zone: int,
) -> pl.Series:
    """The rows of a file that go: those any form of the erasure matches (each form that
    matched is noted in ``report``, each row gone in ``gone``)."""
    hit = pl.Series([False] * rows.height, dtype=pl.Boolean)
    for form, erasure in variants:
        found = session.erasures.covered(rows, [erasure], zone=zone)
        if form is not None and found.any():
            report.matched.add(form.label)
            if form.network is not None:
                report.networks.add(form.network)
        hit = hit | found
    taken = rows.filter(hit)
    gone.update(zip(taken["request_id"].to_list(), taken["ts"].to_list(), strict=True))
    return hit


def _per_hour(moments: Iterable[datetime]) -> dict[str, int]:
    """How many of ``moments`` fall in each UTC hour (``2026-11-20T10``)."""
    counts: dict[str, int] = {}
    for moment in moments:
        hour = f"{moment:%Y-%m-%dT%H}"
        counts[hour] = counts.get(hour, 0) + 1
    return dict(sorted(counts.items()))


def forms(
    address: str,
    policy: PrivacyPolicy,
    settings: Sequence[Setting] = (),
    keys: Sequence[bytes] = (),
) -> list[Form]:
    """Every form ``address`` may be stored in, under any setting the data went through:
    as received, its network under each prefix ``truncate`` had (the configured one and
    those the zones' privacy marks name), and the keyed hash of each under the key of
    ``[privacy] hash_key_env`` (where this process holds it) and under each key the marks
    name that is among ``keys`` (the erasure keys held: retired ones too). ConfigError
    where the marks name a hash key none of these is."""
    parsed = ipaddress.ip_address(canonical(address))

    def prefix(setting: Setting) -> int:
        return setting.ipv4_prefix if parsed.version == 4 else setting.ipv6_prefix

    prefixes = {policy.ipv4_prefix if parsed.version == 4 else policy.ipv6_prefix}
    for setting in settings:
        if setting.ip in ("truncate", "hash") and setting.ipv4_prefix:
            prefixes.add(prefix(setting))
    found = [Form("the address itself", parsed.compressed)]
    for bits in sorted(prefixes):
        if bits >= parsed.max_prefixlen:
            continue
        network = ipaddress.ip_network(f"{parsed}/{bits}", strict=False)
        text = network.network_address.compressed
        found.append(Form(f"its network {network}", text, str(network)))
    key = policy.key if policy.ip == "hash" else policy.erasure_key
    hashings: dict[int, PrivacyPolicy] = {}
    for secret in (key, *keys):
        if secret:
            hashing = PrivacyPolicy("hash", key=secret)
            hashings.setdefault(hashing.setting.key_id, hashing)
    current = PrivacyPolicy("hash", key=key).setting.key_id if key else None
    key_ids = [] if current is None else [current]
    for setting in settings:  # rows hashed under a key this process cannot reproduce
        if setting.ip == "hash" and setting.key_id not in hashings:
            raise ConfigError(
                f"privacy.hash_key_env: rows were stored as keyed hashes under key "
                f"{setting.key_id:08x}, which this process does not hold (neither "
                "hash_key_env nor the retired keys of <root>/work/erasure-retired.keys), so "
                "forget --ip cannot find them; set privacy.hash_key_env to that key, or "
                "retire it there (nothing was removed)"
            )
        if setting.ip == "hash":
            key_ids.append(setting.key_id)
    plain = list(found)
    for key_id in dict.fromkeys(key_ids):
        for form in plain:
            hashed = hashings[key_id].stored_as(form.text)
            if hashed is None:
                continue
            label = f"the keyed hash of {form.label.removeprefix('its ')}"
            if key_id != current:
                label += f" (under the retired key {key_id:08x})"
            found.append(Form(label, hashed, form.network, key_id))
    return found


def _variants(
    session: LakeSession, erasure: Erasure, target: Target, scope: list[int], report: ForgetReport
) -> tuple[Erasure, list[tuple[Form | None, Erasure]]]:
    """The erasure to record, and each erasure to match the zones' rows by: an address as
    each form it may be stored in (:func:`forms`), a request id by the id itself (never
    recorded). An address's erasure holds the keyed hashes of every form: the address's
    own untagged (it matches the client's rows read again under any later setting, by
    the address as received or as stored); a network's tagged ``net@<zones>:``, the
    zones whose privacy marks show rows stored as it (everyone in it: forget removed
    them there; matched as stored there), else ``net:`` (matched only by an address
    received as that network: anonymised by the provider). Rows restored from
    ``_quarantine/`` are matched the same. All are known before anything is removed: a
    process reads an erasure once. ``report`` gets the networks it holds back so."""
    if target.request_id is not None:
        raw = target.request_id.strip().lower()
        return erasure, [(None, replace(erasure, filter=raw, key_id=None))]
    assert target.ip is not None
    key = session.erasure_keys.get()
    assert key is not None  # made by _erasure
    codes = session.log_table(REQUESTS).marks(scope, PRIVACY) if scope else {}
    before = session.log_table(REQUESTS).marks(scope, PRIVACY_BEFORE) if scope else {}
    per_zone = {
        zone: [Setting.decode(c) for c in (codes.get(zone), before.get(zone)) if c]
        for zone in scope
    }
    settings = [setting for found in per_zone.values() for setting in found]
    held = [k.secret for k in session.erasure_keys.every()]
    variants: list[tuple[Form | None, Erasure]] = []
    own: set[str] = set()
    networks: dict[str, set[int]] = {}  # a network form's hash: the zones stored as it
    for form in forms(target.ip, session.privacy, settings, held):
        text = key.digest(canonical(form.text))
        if form.network is None:
            own.add(text)
        elif text not in own:  # (an address that is its network's: its own form)
            stored = {zone for zone, found in per_zone.items() if form.stored_by(found)}
            networks.setdefault(text, set()).update(stored)
            report.held_as_received.add(form.network)
            if stored:
                report.held_as_stored.setdefault(form.network, set()).update(stored)
        if all(text != e.filter for _, e in variants):
            variants.append((form, replace(erasure, filter=text)))
    recorded = own | {_tagged(text, zones) for text, zones in networks.items()}
    return replace(erasure, filter=" ".join(sorted(recorded))), variants


def _tagged(digest: str, zones: set[int]) -> str:
    """A network form's hash in an erasure's filter (:mod:`cdnlake.lake.zone.erasures`)."""
    return (
        f"{NETWORK}@{','.join(str(z) for z in sorted(zones))}:{digest}"
        if zones
        else f"{NETWORK}:{digest}"
    )


def _quarantined(session: LakeSession, zones: list[int] | None) -> int:
    """How many files set aside in ``_quarantine/`` belong to ``zones`` (all without)."""
    import pyarrow.fs as pafs

    from cdnlake.lake.upkeep.restore import KEPT
    from cdnlake.lake.zone.damage import QUARANTINE

    selector = pafs.FileSelector(QUARANTINE, recursive=True, allow_not_found=True)
    try:
        found = session.lake.filesystem().get_file_info(selector)
    except OSError as exc:
        raise StorageError(f"cannot list {QUARANTINE}: {first_line(exc)}") from None
    count = 0
    for info in found:
        match = KEPT.fullmatch(info.path.removeprefix(f"{QUARANTINE}/"))
        if info.type == pafs.FileType.File and match is not None:
            count += zones is None or int(match["zone"]) in zones
    return count


def _erasure(session: LakeSession, target: Target, now: datetime) -> Erasure:
    """The erasure to record: an address, or a request id (lowercased), as its keyed hash
    under the erasure key, never itself (:func:`_variants` adds the address's forms)."""
    erasure_id = f"erasure-{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    key = session.erasure_keys.get(create=True)
    if key is None:
        raise StorageError("forget: no erasure key (no storage root's work folder)")
    if target.request_id is not None:
        kind, text = REQUEST_ID, key.digest(target.request_id.strip().lower())
    else:
        assert target.ip is not None
        kind, text = IP, key.digest(canonical(target.ip))
    key_id = key.key_id
    return Erasure(
        erasure_id,
        zone=EVERY_ZONE,
        erased_at=now,
        kind=kind,
        filter=text,
        key_id=key_id,
        from_day=target.from_day,
        to_day=target.to_day,
    )


def _concerned(target: Target, known: tuple[int, ...]) -> set[int]:
    """Of the zones ``known`` (configured), those the erasure concerns."""
    return set(known) & set(target.zones) if target.zones else set(known)


def _rows(erasure: Erasure, target: Target, report: ForgetReport) -> list[dict[str, object]]:
    """The erasure's rows: one per zone named (``--zone``), else one for every zone."""
    zones = list(target.zones) or [EVERY_ZONE]
    rows = []
    for zone in zones:
        mine = report.requests if zone == EVERY_ZONE else {zone: report.requests.get(zone, 0)}
        rows.append(
            {
                "zone": zone,
                "erasure_id": erasure.erasure_id,
                "erased_at": erasure.erased_at,
                "kind": erasure.kind,
                "filter": erasure.filter,
                "key_id": erasure.key_id,
                "from_day": target.from_day,
                "to_day": target.to_day,
                "days": ",".join(d.isoformat() for d in sorted(report.days)) or None,
                "requests_removed": sum(mine.values()),
                "rejected_removed": report.rejected if zone == zones[0] else 0,
                "shield_removed": report.shield if zone == zones[0] else 0,
                "files_rewritten": report.files if zone == zones[0] else 0,
                "vacuumed_at": report.erased_at if report.vacuumed else None,
                "hours_removed": _hours_json(report, zone),
                "follows": instants_text(erasure.follows),
                "replaces": instants_text(erasure.replaces),
            }
        )
    return rows


def _hours_json(report: ForgetReport, zone: int) -> str | None:
    """The requests removed per zone and hour, as JSON (``{"7": {"2026-11-20T10": 12}}``):
    every zone's in the row of every zone, a zone's own in its row."""
    hours = report.hours if zone == EVERY_ZONE else {zone: report.hours.get(zone, {})}
    kept = {str(z): h for z, h in sorted(hours.items()) if h}
    return json.dumps(kept, separators=(",", ":")) if kept else None


def _days(target: Target) -> list[str] | None:
    """The days to look at (every day where the range is open)."""
    if target.from_day is None or target.to_day is None:
        return None
    span = (target.to_day - target.from_day).days
    return [(target.from_day + timedelta(days=k)).isoformat() for k in range(span + 1)]


def _zones_of(session: LakeSession, spec: TableSpec, zones: list[int] | None) -> list[int]:
    """The zones the table holds files of (of ``zones``, where given)."""
    import pyarrow as pa

    table = session.lake.open(spec)
    if table is None:
        return []
    actions = pa.table(add_actions_table(table))
    if actions.num_rows == 0:
        return []
    held = {int(z) for z in actions[f"partition.{spec.zone_column}"].to_pylist()}
    return sorted(held if zones is None else held & set(zones))


@dataclass(frozen=True)
class Traces:
    """What marks free text (a rejected line, a shield event's text or labels) as holding
    the address: an address in it (:func:`cdnlake.privacy.addresses_in`, so by its parsed
    value, however written) that is the address or one of its network forms, or one of
    its keyed hashes standing alone."""

    addresses: frozenset[str]
    hashes: tuple[str, ...]

    def found(self, rows: pl.DataFrame, columns: Sequence[str]) -> pl.Series:
        """Which ``rows`` hold it in any of ``columns``."""
        wanted = sorted(self.addresses)
        # a keyed hash stands alone in text as a request id does
        hashed = "|".join(f"(?:{request_id_in_text(h)})" for h in self.hashes)
        hit = pl.Series([False] * rows.height, dtype=pl.Boolean)
        for column in columns:
            held = addresses_column(rows[column]).list.eval(pl.element().is_in(wanted))
            hit = hit | held.list.any().fill_null(False)
            if hashed:
                hit = hit | rows[column].str.contains(hashed).fill_null(False)
        return hit


def _traces(address: str, stored: Callable[[str], str | None], forms: Sequence[str]) -> Traces:
    """The traces of ``address`` in free text: itself, as stored, and each of its
    ``forms`` (networks by their address, keyed hashes as they are)."""
    texts = {canonical(address), stored(canonical(address)) or "", *forms} - {""}
    parsed = {text: parse_address(text) for text in texts}
    return Traces(
        frozenset(a.compressed for a in parsed.values() if a is not None),
        tuple(sorted(text.lower() for text, a in parsed.items() if a is None)),
    )


def _forget_rejects(
    session: LakeSession, target: Target, traces: Traces | None, zones: list[int] | None
) -> int:
    """Delete the rejected lines whose raw text (or request id) holds what is forgotten."""
    lake = session.lake
    table = lake.open(REJECTED_LINES)
    if table is None:
        return 0
    partitions = [("zone", "in", [str(z) for z in zones])] if zones else None
    try:
        found = lake.dataset(REJECTED_LINES, table, partitions).to_table(
            columns=["zone", "record_key", "raw_line", "request_id", "file", "rejected_at"]
        )
    except OSError as exc:
        raise StorageError(f"cannot read rejected_lines: {exc}") from None
    rows = pl.from_arrow(found)
    assert isinstance(rows, pl.DataFrame)
    if target.request_id is not None:
        wanted = target.request_id.strip().lower()
        hit = same_id(rows["request_id"], wanted).fill_null(False) | rows["raw_line"].str.contains(
            request_id_in_text(wanted)
        ).fill_null(False)
    else:
        assert traces is not None
        hit = traces.found(rows, ("raw_line",))
    gone = rows.filter(hit)
    if target.from_day is not None or target.to_day is not None:
        days = zip(gone["file"].to_list(), gone["rejected_at"].to_list(), strict=True)
        covered = [target.covers(reject_day(file, at)) for file, at in days]
        gone = gone.filter(pl.Series(covered, dtype=pl.Boolean))
    if gone.height == 0:
        return 0
    return Bookkeeping(session).delete_rejects(gone)


def reject_day(file: str | None, rejected_at: datetime | None) -> date | None:
    """The UTC day a rejected line belongs to, for ``--from/--to``: the day its source
    names (a v1 day file ``api:v1:MM-dd-yy/...``, a v2 window ``api:v2?from=...``, a
    shield day ``api:shield:YYYY-MM-DD``), else the day it was rejected."""

    text = file or ""
    try:
        if found := re.match(r"api:v1:(\d\d-\d\d-\d\d)/", text):
            return datetime.strptime(found[1], "%m-%d-%y").date()
        if found := re.match(r"api:v2\?from=(\d{4}-\d\d-\d\d)", text):
            return date.fromisoformat(found[1])
        if found := re.match(r"api:shield:(\d{4}-\d\d-\d\d)", text):
            return date.fromisoformat(found[1])
    except ValueError:
        pass
    return None if rejected_at is None else rejected_at.astimezone(UTC).date()


def leaves_storage(erased_at: datetime, vacuum_hours: int, maintain_at: str) -> datetime:
    """When the old files leave storage without ``--vacuum-now``: at the first daily
    maintenance (``maintain_at``, UTC) at least ``vacuum_hours`` after the erasure."""
    due = erased_at + timedelta(hours=vacuum_hours)
    hour, minute = (int(part) for part in maintain_at.split(":"))
    run = due.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return run if run >= due else run + timedelta(days=1)
