"""The verdict of one zone-hour: the lake's counts held against the provider's.

Pure logic (no I/O): ``ok`` when the lake holds at least ``1 - tolerance`` of what the
provider counted, in requests, 4xx, 5xx and bytes alike; ``missing`` when the provider
served requests and the lake holds none; ``short`` otherwise; ``pending`` for an hour
that is not yet closed, still inside ``lag_seconds`` (records may still arrive), or not
wholly behind the zone's watermark (ingestion has not read all of it yet: the zone is
only behind), which is never short. A short or missing hour says what to do next: read
it again while the provider's logging API still serves it (3 days), or that it is past
retention. ``before``: an hour that began before cdnlake first read the zone (the earliest
window of its passes), wholly or in part: not audited, never short, and a day holding one
is not kept (it never feeds the completeness alert). ``expired``: an hour of a day that
``[retention] requests_days`` removed from the lake: not audited, never short or missing.
Requests ``cdnlake forget`` removed from an hour (the relation ``erasures`` counts them per
zone and hour) are explained, never short: the lake's count and the erased requests
together are held against the provider's; in such an hour only the requests are compared
(the erased requests' errors and bytes are not recorded).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Literal

from cdnlake.retention import RETENTION

Verdict = Literal["ok", "short", "missing", "pending", "before", "expired"]
HOUR = timedelta(hours=1)
MEASURES = ("requests", "errors_4xx", "errors_5xx", "bytes")


@dataclass(frozen=True)
class Counts:
    requests: int = 0
    errors_4xx: int = 0
    errors_5xx: int = 0
    bytes: int = 0

    def get(self, measure: str) -> int:
        value: int = getattr(self, measure)
        return value


@dataclass(frozen=True)
class HourAudit:
    zone_id: int
    hour: datetime  # its start, UTC
    provider: Counts
    lake: Counts
    verdict: Verdict
    advice: str = ""
    erased: int = 0  # requests cdnlake forget removed from the hour

    @property
    def difference(self) -> int:
        """Requests the provider counted that the lake lacks and no erasure explains
        (negative: the lake has more)."""
        return self.provider.requests - self.lake.requests - self.erased

    @property
    def ratio(self) -> float | None:
        """The lake's requests, and those erased, over the provider's; None when the
        provider counted none."""
        held = self.lake.requests + self.erased
        if self.provider.requests == 0:
            return None if held else 1.0
        return held / self.provider.requests

    @property
    def failed(self) -> bool:
        return self.verdict in ("short", "missing")


COLUMNS = [
    "zone",
    "hour",
    "provider_requests",
    "lake_requests",
    "erased_requests",
    "difference",
    "ratio",
    "verdict",
    "provider_4xx",
    "lake_4xx",
    "provider_5xx",
    "lake_5xx",
    "provider_bytes",
    "lake_bytes",
    "advice",
]


def row(h: HourAudit) -> tuple[Any, ...]:
    """``h`` as a row of :data:`COLUMNS`."""
    ratio = None if h.ratio is None else round(h.ratio, 6)
    return (
        h.zone_id,
        h.hour.strftime("%Y-%m-%dT%H:%MZ"),
        h.provider.requests,
        h.lake.requests,
        h.erased,
        h.difference,
        ratio,
        h.verdict,
        h.provider.errors_4xx,
        h.lake.errors_4xx,
        h.provider.errors_5xx,
        h.lake.errors_5xx,
        h.provider.bytes,
        h.lake.bytes,
        h.advice,
    )


def short_in(provider: Counts, lake: Counts, tolerance: float, erased: int = 0) -> list[str]:
    """The measures in which the lake holds less than ``1 - tolerance`` of the provider
    (``erased``: requests an erasure removed, counted as held; then only the requests are
    compared)."""
    if erased:
        held = lake.requests + erased
        return ["requests"] if held < provider.requests * (1 - tolerance) - 1e-9 else []
    return [m for m in MEASURES if lake.get(m) < provider.get(m) * (1 - tolerance) - 1e-9]


def verdict(
    hour: datetime,
    provider: Counts,
    lake: Counts,
    *,
    tolerance: float,
    now: datetime,
    lag: timedelta,
    watermark: datetime | None,
    started: datetime | None = None,
    kept_from: date | None = None,
    erased: int = 0,
) -> Verdict:
    """``watermark``: the zone's (None: not set), before which ingestion has read all the
    provider served; an hour it has not passed yet is pending, not short. ``started``:
    where cdnlake first read the zone; an hour that began before it is ``before``.
    ``kept_from``: the first day retention keeps; an hour of a day before it is
    ``expired``. ``erased``: requests erased from the hour (explained, not short)."""
    if kept_from is not None and hour.date() < kept_from:
        return "expired"
    if started is not None and hour < started:
        return "before"
    if hour + HOUR > now - lag or watermark is None or hour + HOUR > watermark:
        return "pending"
    if provider.requests > 0 and lake.requests + erased == 0:
        return "missing"
    return "short" if short_in(provider, lake, tolerance, erased) else "ok"


def reread_command(zone_id: int, hour: datetime) -> str:
    """The command that reads one hour of a zone again."""
    return (
        f"cdnlake ingest --zone {zone_id} --from {hour:%Y-%m-%dT%H:%MZ} "
        f"--to {hour + HOUR:%Y-%m-%dT%H:%MZ}"
    )


def advice(zone_id: int, hour: datetime, now: datetime) -> str:
    """What to do about a short or missing hour (one the zone's watermark has passed)."""
    served_until = hour + RETENTION
    if served_until > now:
        return (
            f"the provider's logging API still serves this hour until "
            f"{served_until:%Y-%m-%d %H:%M} UTC: read it again before then with "
            f"`{reread_command(zone_id, hour)}`"
        )
    return (
        "past the provider's 3-day log retention: it cannot be read again; what the lake "
        "lacks is lost"
    )


def audit_hour(
    zone_id: int,
    hour: datetime,
    provider: Counts,
    lake: Counts,
    *,
    tolerance: float,
    now: datetime,
    lag: timedelta,
    watermark: datetime | None,
    started: datetime | None = None,
    kept_from: date | None = None,
    erased: int = 0,
) -> HourAudit:
    found = verdict(
        hour,
        provider,
        lake,
        tolerance=tolerance,
        now=now,
        lag=lag,
        watermark=watermark,
        started=started,
        kept_from=kept_from,
        erased=erased,
    )
    note = ""
    if found == "expired":
        note = (
            f"expired: [retention] requests_days keeps days from {kept_from} on; "
            "the lake holds no rows before it"
        )
    elif found == "before":
        assert started is not None
        note = (
            f"before cdnlake started: zone {zone_id} was first read from "
            f"{started:%Y-%m-%d %H:%M} UTC; not audited"
        )
    elif found == "pending" and hour + HOUR <= now - lag:  # closed: the zone is only behind
        where = f"at {watermark:%Y-%m-%d %H:%M} UTC" if watermark else "not set"
        note = (
            f"not ingested yet (zone {zone_id}'s watermark is {where}): the next "
            "`cdnlake ingest` (or the daemon's next pass) reads it"
        )
    elif found in ("short", "missing"):
        measures = ", ".join(short_in(provider, lake, tolerance, erased)) or "requests"
        note = f"short in {measures}; {advice(zone_id, hour, now)}"
        if found == "short":
            note += (
                '; records the lake rejected are short too: see `cdnlake sql "SELECT * FROM '
                f'rejected_lines WHERE pull_zone_id = {zone_id}"`'
            )
    if erased and found != "expired":
        said = f"{erased} request(s) erased by `cdnlake forget` (relation erasures)"
        note = f"{said}; {note}" if note else said
    return HourAudit(zone_id, hour, provider, lake, found, note, erased)
