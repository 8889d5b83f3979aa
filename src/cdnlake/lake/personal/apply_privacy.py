"""``maintain --apply-privacy``: rows stored under a weaker ``[privacy]`` setting, rewritten.

Per zone, each (zone, day) partition where the policy changes a value is rewritten as
maintain compacts one (:func:`~cdnlake.lake.upkeep.maintain.compact`, through the door),
the zone held as for a rewind; then the zone's privacy marks say so, and
``rejected_lines`` is treated by one MERGE per zone. What cannot be done (hashes cannot be
truncated, nor hashed again) is said per zone, and nothing of that zone is rewritten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from cdnlake.errors import CdnlakeError, ConfigError, StopRequested, StorageError
from cdnlake.lake.log.progress import (
    LEGACY_PRIVACY,
    PRIVACY,
    Versions,
    ZoneHold,
    describe_stored,
    privacy_applied,
    stored_settings,
)
from cdnlake.lake.log.schema import REJECTED_LINES, REQUESTS, SHIELD_EVENTS, TableSpec, frame_of
from cdnlake.lake.log.store import held_zones
from cdnlake.lake.log.table import Merge
from cdnlake.lake.upkeep.maintain import _holding, compact
from cdnlake.lake.zone.bookkeeping import scrubbed
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from cdnlake.privacy import HASH_PATTERN, PrivacyPolicy, Setting

log = logging.getLogger(__name__)

TREATED = ("remote_ip", "url", "path", "referer", "log", "labels_json")  # what a policy may change


@dataclass
class ZoneOutcome:
    """What the rewrite did to one zone of one table."""

    table: str
    zone: int
    before: str  # the setting(s) its rows were stored under, as status says it
    partitions: int = 0  # (zone, day) partitions rewritten
    rows: int = 0  # rows whose stored values changed
    error: str | None = None

    def line(self) -> str:
        head = f"{self.table} zone {self.zone} (stored: {self.before})"
        if self.error:
            return f"{head}: NOT rewritten: {self.error}"
        return f"{head}: {self.rows} row(s) rewritten in {self.partitions} partition(s)"


@dataclass
class PrivacyReport:
    setting: str  # the configured setting, described
    zones: list[ZoneOutcome] = field(default_factory=list)
    rejected_lines: int = 0  # rejected lines whose raw text or reason changed

    @property
    def failed(self) -> list[ZoneOutcome]:
        return [z for z in self.zones if z.error]


def apply_privacy(
    session: LakeSession,
    zones: list[int] | None = None,
    *,
    locks: Path | None = None,
    hold: ZoneHold | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> PrivacyReport:
    """Bring the stored rows of ``zones`` (every zone without) to the session's policy."""
    policy = session.privacy
    report = PrivacyReport(policy.describe())
    for spec in (REQUESTS, SHIELD_EVENTS):
        table = session.lake.open(spec)
        if table is None:
            continue
        log_table = session.log_table(spec)
        for zone in _zones_of(spec, table, zones):
            if stop():
                raise StopRequested()
            marks = log_table.snapshot(zone).mark
            if not _mixed(marks, policy):
                continue  # every row of the zone was stored under this very setting
            outcome = ZoneOutcome(spec.name, zone, describe_stored(marks))
            try:
                _apply_zone(session, spec, zone, outcome, locks, hold, stop)
            except StopRequested:
                raise
            except CdnlakeError as exc:
                outcome.error = str(exc)
            report.zones.append(outcome)
            log.info("apply-privacy %s", outcome.line())
    report.rejected_lines = _rejected_lines(session, zones, stop)
    return report


def _mixed(marks: Versions, policy: PrivacyPolicy) -> bool:
    """Whether some rows of the zone may have been stored under another setting (a zone
    with files but no marks: as received, before [privacy] existed)."""
    settings = stored_settings(marks) or [Setting.decode(LEGACY_PRIVACY)]
    return len(settings) != 1 or policy.setting.hashing(settings[0]) != settings[0]


def _zones_of(spec: TableSpec, table: Any, zones: list[int] | None) -> list[int]:
    return [z for z in held_zones(spec, table) if zones is None or z in zones]


def _apply_zone(
    session: LakeSession,
    spec: TableSpec,
    zone: int,
    outcome: ZoneOutcome,
    locks: Path | None,
    hold: ZoneHold | None,
    stop: Callable[[], bool],
) -> None:
    """Rewrite the zone's partitions the policy changes, holding the zone, then mark it."""
    wanted = session.privacy.setting
    with _holding(locks, hold, spec, zone) as generation:
        writer = ZoneWriter(session, spec, zone, holder=generation)
        marks = writer.table.snapshot(zone).mark
        for stored in stored_settings(marks):
            why = stored.cannot_become(wanted)
            if why is not None:
                raise ConfigError(why)
        seen = marks(PRIVACY)
        reached = all(s.reaches(wanted) for s in stored_settings(marks) or [Setting()])
        table = session.lake.open(spec)
        if table is None:
            raise StorageError(f"{spec.name}: the table went away")
        columns = [c for c in TREATED if c in spec.columns]
        for day in _days_of(session, spec, table, zone):
            if stop():
                raise StopRequested()
            changed = _rewrite_partition(session, spec, table, zone, day, columns)
            if changed:
                outcome.partitions += 1
                outcome.rows += changed

        def applied(current: Versions) -> dict[str, int]:
            """Marked done unless rows came meanwhile under yet another setting."""
            if current(PRIVACY) not in (seen, wanted.code()):
                return {}
            return privacy_applied(wanted, current)

        if reached:  # else older rows were stored stronger: the marks keep saying so
            writer.commit(writer.empty(), applied)


def _days_of(session: LakeSession, spec: TableSpec, table: Any, zone: int) -> list[str]:
    actions = session.lake.add_actions(spec, table, [(spec.zone_column, "=", zone)])
    return sorted({str(a["partition.date"]) for a in actions})


def _rewrite_partition(
    session: LakeSession, spec: TableSpec, table: Any, zone: int, day: str, columns: list[str]
) -> int:
    """The rows of one (zone, day) whose treated values the policy changes: 0, or that many
    rewritten (the whole partition replaced in one share)."""
    policy = session.privacy
    changed: list[int] = [0]

    def choose(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The partition's files where the policy changes a value (all of them), or none."""
        if not actions:
            return []
        dataset = session.lake.dataset(spec, table, actions=actions)
        stored = frame_of(dataset.to_table(columns=columns))
        _refuse_hashes(policy, stored)
        changed[0] = int(_differs(stored, policy.rows(stored), columns).sum())
        return actions if changed[0] else []

    done = compact(session, spec, table, zone, day, choose, treat=policy.rows)
    return 0 if done is None else changed[0]


def _differs(rows: pl.DataFrame, treated: pl.DataFrame, columns: list[str]) -> pl.Series:
    """Whether each row has a value of ``columns`` that ``treated`` changed."""
    differs = pl.any_horizontal(pl.col(c).ne_missing(treated[c]) for c in columns)
    return rows.select(differs).to_series()


def _refuse_hashes(policy: PrivacyPolicy, stored: pl.DataFrame) -> None:
    """Addresses that are hashes already (rows of a zone whose marks were lost, or of a
    lake older than its marks) cannot be truncated: refused, rather than made NULL."""
    if policy.ip != "truncate" or "remote_ip" not in stored.columns:
        return
    if stored.select(pl.col("remote_ip").str.contains(HASH_PATTERN).any()).item():
        raise ConfigError(Setting("hash").cannot_become(Setting("truncate")) or "")


def _rejected_lines(session: LakeSession, zones: list[int] | None, stop: Callable[[], bool]) -> int:
    """Rejected lines' raw text and reasons treated as the policy says: one MERGE per zone
    whose rows change; how many rows changed."""
    policy = session.privacy
    lake = session.lake
    if policy.changes_nothing:
        return 0
    table = lake.open(REJECTED_LINES)
    if table is None:
        return 0
    merges = session.merge_table(REJECTED_LINES)
    total = 0
    for zone in _zones_of(REJECTED_LINES, table, zones):
        if stop():
            raise StopRequested()
        dataset = lake.dataset(REJECTED_LINES, table, [("zone", "=", str(zone))])
        rows = frame_of(dataset.to_table())
        treated = scrubbed(policy, rows)
        changed = treated.filter(_differs(rows, treated, ["raw_line", "reason"]))
        if changed.height == 0:
            continue
        merges.committer.run(_update_texts(changed, zone), patient=False)
        total += changed.height
    return total


def _update_texts(changed: pl.DataFrame, zone: int) -> Merge:
    """The MERGE that replaces the raw text and reason of ``changed`` (rows as read)."""
    update = {"raw_line": "s.raw_line", "reason": "s.reason"}
    return Merge(lambda: changed, "t.record_key = s.record_key", [zone], update=update)
