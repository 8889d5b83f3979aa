"""``cdnlake migrate-lake`` and ``cdnlake maintain`` (``--restore``): the lake's own upkeep."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from cdnlake.cli.common import Interrupt, interruptible, load, say
from cdnlake.config import Config
from cdnlake.errors import StopRequested, ZoneBusyError

# How long ``--vacuum-now`` waits for a zone's pass in flight on this machine to end.
VACUUM_WAIT_SECONDS = 60.0
# How long a writer no zone lock covers waits for a ``--vacuum-now`` under way to end.
WRITING_WAIT_SECONDS = 600.0

if TYPE_CHECKING:
    from cdnlake.lake.log.schema import TableSpec
    from cdnlake.lake.zone.session import LakeSession


def migrate_lake(args: argparse.Namespace) -> int:
    from cdnlake.lake.upkeep.migrate import migrate_lake as migrate
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy

    config = load(args, default_level="WARNING", legacy_ok=True)
    with (
        # A --vacuum-now waits for it or names it. (Ctrl-C stops it as it always did: a
        # run cut off is finished by the next.)
        writing(config, "migrate-lake", lambda: False),
        LakeSession.from_config(
            config.storage,
            privacy=PrivacyPolicy.from_config(config.privacy),
        ) as session,
    ):
        report = migrate(config.storage, session)
    if not report.moved_to:
        where = config.storage.lake_location
        if _has_tables(config):
            print(f"nothing to migrate: the lake at {where} is Delta already")
        else:
            print(f"nothing to migrate: there is no lake at {where} yet")
        return 0
    for folder in report.moved_to:
        print(f"migrated {folder} (kept there: the earlier lake, state and warehouse)")
    for table in sorted(report.rows):
        print(
            f"  {table}: {report.rows[table]} rows added, {report.duplicates[table]} already there"
        )
    for table, rows in sorted(report.bookkeeping.items()):
        print(f"  {table}: {rows} rows added")
    for line in report.unreadable:
        print(f"  NOT MIGRATED (unreadable, kept): {line}")
    return 1 if report.unreadable else 0


def _has_tables(config: Config) -> bool:
    from cdnlake.lake.log.schema import TABLES
    from cdnlake.lake.log.store import Lake

    lake = Lake.from_config(config.storage)
    return any(lake.open(spec) is not None for spec in TABLES)


def maintain(args: argparse.Namespace) -> int:
    from cdnlake.coordination import maintain_hold
    from cdnlake.ingest.result import this_daemon
    from cdnlake.lake.upkeep.maintain import EVERY_TABLE, configure
    from cdnlake.lake.upkeep.maintain import maintain as run_maintain
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy

    config = load(args, default_level="WARNING")
    if args.zone:
        config.select_all_zones(args.zone)  # unknown ids are refused
    hours = config.retention.vacuum_hours if args.retention_hours is None else args.retention_hours
    # --retention-hours 0 deletes files removed a moment ago, which a writer may still
    # need: as --vacuum-now, only while no other process writes (the run itself keeps an
    # hour, then every removed file goes with every writer held off).
    at_once = "--vacuum-now" if args.vacuum_now else "--retention-hours 0" if hours == 0 else None
    if at_once:
        refuse_beside_daemon(config, f"maintain {at_once}")  # before any work
    with (
        interruptible("maintain") as stop,
        LakeSession.from_config(
            config.storage,
            privacy=PrivacyPolicy.from_config(config.privacy),
        ) as session,
    ):
        if args.restore:
            with writing(config, "maintain --restore", stop.is_set):
                return stop.run(lambda: restore(session, args.zone))
        privacy_failed = False
        try:
            with writing(config, "maintain", stop.is_set):  # let go before --vacuum-now
                if args.apply_privacy:
                    configure(session)  # before its rewrite (maintain's own run does it too)
                    privacy_failed = stop.run(
                        lambda: apply_privacy(session, config, args.zone, stop.is_set),
                        on_abandon=lambda: say(stopped_maintain(stop)),
                    )
                report = stop.run(
                    lambda: run_maintain(
                        session,
                        args.zone,
                        retention_hours=max(hours, 1),
                        retention=config.retention,
                        check_all=args.check_all,
                        locks=config.storage.work / "locks",
                        hold=maintain_hold(config, this_daemon()),
                        stop=stop.is_set,
                    ),
                    on_abandon=lambda: say(stopped_maintain(stop)),
                )
            if at_once:
                every = None if args.vacuum_now else [*EVERY_TABLE]
                deleted = stop.run(
                    lambda: vacuum_now(session, config, f"maintain {at_once}", stop.is_set, every),
                    on_abandon=lambda: say(stopped_maintain(stop)),
                )
                print(f"the old bytes have left storage ({at_once}): {deleted} file(s)")
            elif args.apply_privacy:
                print(
                    "apply-privacy: the replaced files leave storage at the first vacuum past "
                    f"retention.vacuum_hours ({config.retention.vacuum_hours} h); "
                    "--vacuum-now removes them now"
                )
        except StopRequested:
            say(stopped_maintain(stop))
            return 1
    for table in report.tables:
        print(table.line())
    if not report.tables:
        print("the lake has no tables yet")
    return 1 if privacy_failed or any(t.damaged for t in report.tables) else 0


def apply_privacy(
    session: LakeSession, config: Config, zones: list[int] | None, stop: Callable[[], bool]
) -> bool:
    """``maintain --apply-privacy``'s rewrite, printed; whether a zone could not be done."""
    from cdnlake.coordination import maintain_hold
    from cdnlake.ingest.result import this_daemon
    from cdnlake.lake.personal.apply_privacy import apply_privacy as run

    report = run(
        session,
        zones,
        locks=config.storage.work / "locks",
        hold=maintain_hold(config, this_daemon()),
        stop=stop,
    )
    print(f"apply-privacy: {report.setting}")
    for zone in report.zones:
        print(f"apply-privacy: {zone.line()}")
    if not report.zones:
        print("apply-privacy: every zone's rows were stored under this setting already")
    print(f"apply-privacy: rejected_lines: {report.rejected_lines} row(s) rewritten")
    return bool(report.failed)


def refuse_beside_daemon(config: Config, command: str) -> None:
    """``--vacuum-now`` runs only while no other process writes the lake: with a daemon
    running on this storage root, refused in one line naming it, before any work."""
    from cdnlake.coordination.sole import holder

    running = holder(config.storage.work)
    if running is not None:
        raise ZoneBusyError(
            f"{command}: refused: a cdnlake daemon ({running}) writes this lake; stop it "
            "first, or leave out --vacuum-now (removed files then leave storage at the first "
            "vacuum past retention.vacuum_hours)"
        )


def writing(
    config: Config, command: str, stop: Callable[[], bool]
) -> contextlib.AbstractContextManager[None]:
    """``command`` writes the lake beside no zone lock: a ``--vacuum-now`` waits for it to
    end or refuses naming it, and it waits for one under way
    (:func:`cdnlake.lake.zone.lock.writing`)."""
    from cdnlake.ingest.result import this_daemon
    from cdnlake.lake.zone.lock import writing as held

    who = f"{this_daemon()} ({command})"
    return held(config.storage.work / "locks", who, wait=WRITING_WAIT_SECONDS, stop=stop)


@contextlib.contextmanager
def writers_held(
    session: LakeSession, config: Config, command: str, stop: Callable[[], bool]
) -> Iterator[None]:
    """Every other writer of the lake held off while the block runs (``--vacuum-now``):
    on this machine the storage root's daemon lock and every zone's lock (a pass in flight
    waited for up to ``VACUUM_WAIT_SECONDS``), in a fleet every zone's lease too (as
    ``maintain`` holds one to rewind it). Refused in one line naming who writes
    (:class:`ZoneBusyError`), nothing done."""
    from cdnlake.coordination import maintain_hold
    from cdnlake.coordination.sole import lock_path
    from cdnlake.ingest.result import this_daemon
    from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS
    from cdnlake.lake.zone.lock import writers_held as held_here

    zones = {(REQUESTS.name, z.id) for z in config.zones}
    zones |= {(SHIELD_EVENTS.name, z.id) for z in config.shield_zones}
    for spec in (REQUESTS, SHIELD_EVENTS):
        zones |= {(spec.name, zone) for zone in session.lake.zones(spec)}
    work = config.storage.work
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(
                held_here(
                    lock_path(work),
                    work / "locks",
                    zones,
                    who=f"{this_daemon()} ({command})",
                    wait=VACUUM_WAIT_SECONDS,
                    stop=stop,
                )
            )
            hold = maintain_hold(config, this_daemon(), stop)
            if hold is not None:  # a fleet: the zones' leases too
                for table, zone in sorted(zones):
                    held.enter_context(hold(table, zone))
        except ZoneBusyError as exc:
            raise ZoneBusyError(f"{command}: refused: {exc}; nothing vacuumed") from None
        yield


def vacuum_now(
    session: LakeSession,
    config: Config,
    command: str,
    stop: Callable[[], bool],
    specs: list[TableSpec] | None = None,
) -> int:
    """The files the lake's tables removed (``specs``; by default those that may hold
    personal data), deleted now, every other writer held off."""
    from cdnlake.lake.log.schema import REJECTED_LINES, REQUESTS, SHIELD_EVENTS
    from cdnlake.lake.upkeep.maintain import vacuum_removed

    with writers_held(session, config, command, stop):
        return vacuum_removed(session, specs or [REQUESTS, SHIELD_EVENTS, REJECTED_LINES])


def stopped_maintain(stop: Interrupt) -> str:
    return (
        f"cdnlake: interrupted ({stop.signal}): maintain stopped between steps, each step "
        "done so far is whole; run it again to finish"
    )


def restore(session: LakeSession, zones: list[int] | None) -> int:
    """``maintain --restore``: a line per file of the quarantine; 1 if one stays there."""
    from cdnlake.lake.upkeep.restore import restore as run_restore

    results = run_restore(session, zones)
    for item in results:
        print(item.line())
    if not results:
        print(f"nothing to restore: {session.lake.uri.rstrip('/')}/_quarantine holds no file")
    return 1 if any(item.error is not None for item in results) else 0
