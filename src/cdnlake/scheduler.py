"""The ingestion daemon: APScheduler 3.x jobs per zone plus the daily report.

Each zone has its own interval job (``max_instances=1``: never two passes of one zone at
once; ``coalesce``: missed runs collapse into one). Zones run concurrently on a thread
pool, each inside its own request budget (the budgets are shared by the process).
Stopping sets one event that the client checks before every request and while waiting
for budget or backoff, so a pass in flight ends quickly without moving its watermark
past what is durable.

Which zones this daemon polls is its fleet's say (:mod:`cdnlake.coordination`): all of
them when it runs alone on its storage root, its share when several daemons coordinate
through PostgreSQL. A zone's job runs on every daemon and passes unless the zone is held
here; a pass stops at its next page if the hold is lost. The daily report and the daily
maintenance are done by one daemon of the fleet.

A cron trigger only looks ahead: a daemon started after the day's ``report_at`` (or
``maintain_at``) would skip that day's job. So a daemon that starts after it runs the
day's job once its first round of passes is done (yesterday's rows are then in the lake),
unless a daemon of the fleet has done it already (:meth:`Fleet.fleet_job` says which).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from cdnlake.client.core import ApiClient
from cdnlake.client.logging_api import LoggingClient
from cdnlake.config import Config, ShieldZoneConfig, ZoneConfig
from cdnlake.coordination import fleet_for, lease_key, lease_keys, maintain_hold
from cdnlake.coordination.fleet import Fleet, Turn
from cdnlake.errors import StopRequested
from cdnlake.forwarding.receiver import Receiver
from cdnlake.ingest.passes import Ingestor, ingest_shield_zone
from cdnlake.ingest.result import ZoneResult, this_daemon, utcnow
from cdnlake.ingest.runner import PASSES_IN_FLIGHT, AnyStop
from cdnlake.lake.log.schema import REQUESTS, SHIELD_EVENTS
from cdnlake.lake.zone.session import LakeSession
from cdnlake.monitoring.metrics import DaemonMetrics
from cdnlake.privacy import PrivacyPolicy

log = logging.getLogger("cdnlake.daemon")


class _DayOpen(Exception):
    """Leaves a daily audit's fleet job open: its day is not kept yet for every zone (the
    lines that say which and why)."""


class _NotKept(Exception):
    """Leaves a daily audit's fleet job open: the day was audited, keeping it failed."""


DEFAULT_STOP_GRACE_SECONDS = 8.0
COMPACT_MINUTES = 10  # how often today's partitions with many small files are compacted
# The longest wait between two tries of a daily audit not done (the first waits one
# compaction round, each next twice as long as the one before).
AUDIT_RETRY_MAX = timedelta(hours=2)
# The days a zone's archive job looks at (two month folders at most): newly closed parts
# and a week or two the daemon was down; older history is `cdnlake backfill`'s.
ARCHIVE_DAYS = 31
# Archive jobs running at once, on workers of their own: a daemon catching up on many
# zones' archives (after an outage) keeps every poll worker for the polls.
ARCHIVE_JOBS = 4


class Daemon:
    def __init__(
        self,
        config: Config,
        api: ApiClient,
        *,
        clock: Callable[[], datetime] = utcnow,
        report_trigger: Any = None,
        report_writer: Callable[[date], Any] | None = None,
        maintain_trigger: Any = None,
        compact_trigger: Any = None,
        fleet: Fleet | None = None,
        metrics: DaemonMetrics | None = None,
        catch_up: bool = True,
        session: LakeSession | None = None,
    ) -> None:
        """``session``: the process's lake, everything the daemon runs writes through it
        (its own, closed as it stops, where none is given: it tells ``metrics``' traffic
        counters what it stores)."""
        self.config = config
        self._own_session = session is None
        self.session = session or LakeSession.from_config(
            config.storage,
            privacy=PrivacyPolicy.from_config(config.privacy),
            traffic=metrics.traffic if metrics is not None else None,
        )
        self.fleet = fleet or fleet_for(config, this_daemon())
        self.metrics = metrics
        self._jobs: dict[str, str] = {}  # lease key -> its poll job
        # Zones just taken whose first pass has not ended: they count against the room
        # the fleet may take new zones in (see :meth:`room`).
        self._unpolled: set[str] = set()
        self.api = api
        self.stop_event = api.abort
        self.ingestor = Ingestor(
            config,
            LoggingClient(api),
            self.session,
            clock=clock,
            stop=self.stop_event,
        )
        self.clock = clock
        self.passes = 0
        self.zone_passes: dict[int, int] = {}
        self.report_runs: list[date] = []
        self.audit_runs: list[date] = []
        self.maintain_runs = 0
        self.archive_runs: dict[int, int] = {}  # zone -> archive jobs done here
        self._report_writer = report_writer
        self._report_trigger = report_trigger or daily(config.schedule.report_at)
        self._maintain_trigger = maintain_trigger or daily(config.schedule.maintain_at)
        self._compact_trigger = compact_trigger or IntervalTrigger(
            minutes=COMPACT_MINUTES, timezone=UTC
        )
        self._open_days: Any = None  # lake.maintain.OpenDays, made at the first run
        # Daily jobs to run again at a compaction round: job -> (run, day, why, from when
        # on: None for the next round): a maintenance that left damage, an audit not done,
        # a job whose turn was unknown.
        self._again: dict[str, tuple[Callable[[date], None], date, str, datetime | None]] = {}
        self._audit_tries: dict[date, int] = {}  # day -> its audit's tries not done here
        # The configured daily jobs whose time of day had passed when this daemon started
        # (a job given its own trigger keeps to it; ``catch_up=False``: none, for tests
        # that watch passes alone), and the polls still to run once before them.
        self._catch_up: list[tuple[Callable[[date], None], str, date]] = []
        self._catch_up_at: list[tuple[Callable[[date], None], str, str]] = []
        if catch_up and report_trigger is None:
            self._catch_up_at.append((self.write_report, "report", config.schedule.report_at))
        if catch_up and maintain_trigger is None:
            self._catch_up_at.append((self.maintain, "maintenance", config.schedule.maintain_at))
        self._first_round: set[str] = set()
        zones = len(config.zones) + len(config.shield_zones)
        # A thread per zone up to PASSES_IN_FLIGHT: the runner lets ``concurrency`` of
        # them read the provider at once, and the quiet ones that have read wait for one
        # group commit together (commits per poll follow its latency, not the zones).
        workers = max(2, min(PASSES_IN_FLIGHT, zones) + 1)
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={
                "default": ThreadPoolExecutor(max_workers=workers),
                "archive": ThreadPoolExecutor(max_workers=ARCHIVE_JOBS),
            },
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                # A pass queued behind busy workers still runs, however late: with
                # max_instances=1 a zone has at most one pass waiting, so none starves.
                "misfire_grace_time": None,
            },
        )
        self._lock = threading.Lock()
        self.receiver: Receiver | None = None  # [forwarding] listen: the syslog receiver

    # -- jobs --------------------------------------------------------------------------
    def _held_pass(
        self, key: str, run: Callable[[AnyStop, int | None], ZoneResult]
    ) -> ZoneResult | None:
        """Run one pass of ``key`` if the fleet holds it here, once the previous owner's
        rate window has passed; the pass stops when the daemon stops or the hold is lost,
        and commits under the hold's generation (its fence token)."""
        try:
            if self.stop_event.is_set():
                return None
            with self.fleet.claim(key) as held:
                if held is None:
                    return None
                delay = held.ready_at - time.monotonic()
                if delay > 0 and (self.stop_event.wait(delay) or held.lost.is_set()):
                    return None
                return run(AnyStop(self.stop_event, held.lost), held.generation)
        finally:
            with self._lock:
                first = key in self._unpolled
                self._unpolled.discard(key)
            if first:  # its reading slot is free again: the fleet may take another zone
                self.fleet.more_room()

    def room(self) -> int:
        """How many more zones this daemon can start polling now: its reading slots
        (``ingest.concurrency``) less the zones it took whose first pass has not ended.
        The fleet takes no more new zones than that at a time, so that a zone taken is
        polled at once, not held idle behind other zones' first passes."""
        with self._lock:
            return self.config.ingest.concurrency - len(self._unpolled)

    def poll_zone(self, zone: ZoneConfig) -> ZoneResult | None:
        result = self._held_pass(
            lease_key(REQUESTS.name, zone.id),
            lambda stop, holder: self.ingestor.run_zone(zone, stop=stop, holder=holder),
        )
        if result is not None:
            self._observe(result)
            with self._lock:
                self.zone_passes[zone.id] = self.zone_passes.get(zone.id, 0) + 1
        return result

    def _observe(self, result: ZoneResult) -> None:
        if self.metrics is not None:
            self.metrics.observe(result)
        with self._lock:
            self.passes += 1

    def poll_shield_zone(self, zone: ShieldZoneConfig) -> ZoneResult | None:
        from cdnlake.client.shield import ShieldApi

        result = self._held_pass(
            lease_key(SHIELD_EVENTS.name, zone.id),
            lambda stop, holder: ingest_shield_zone(
                self.config,
                ShieldApi(self.api),
                zone,
                self.session,
                clock=self.clock,
                stop=stop,
                holder=holder,
            ),
        )
        if result is not None:
            self._observe(result)
        return result

    def pick_up_archive(self, zone: ZoneConfig) -> Any:
        """A zone's archive job: the closed parts of its last ``ARCHIVE_DAYS`` days not yet
        imported, imported as ``cdnlake backfill`` does. Only while the fleet holds the
        zone here, under the hold's generation (its commits are fenced as a pass's are);
        it stops when the daemon stops or the hold is lost. A failure is logged: the next
        round tries again."""
        from cdnlake.ingest.archive_client import archive_store
        from cdnlake.ingest.backfill import Backfill, default_span

        assert zone.archive is not None
        key = lease_key(REQUESTS.name, zone.id)
        if self.stop_event.is_set():
            return None
        try:
            with self.fleet.claim(key) as held:
                if held is None:
                    return None
                index = self.config.zones.index(zone)
                password = zone.archive.require_password(f"zones[{index}].archive.password_env")
                store = archive_store(self.api, zone.archive, password)
                job = Backfill(
                    self.config,
                    self.session,
                    store,
                    zone,
                    stop=self.stop_event,
                    clock=self.clock,
                )
                listing = job.listing(*default_span(self.clock(), ARCHIVE_DAYS))
                result = job.run(
                    listing, holder=held.generation, stop=AnyStop(self.stop_event, held.lost)
                )
        except StopRequested:
            return None
        except Exception as exc:  # the daemon must outlive a failed archive job
            log.error("zone %s: archive job failed: %s", zone.id, exc)
            return None
        for part in result.parts:  # rows, duplicates, traffic, last_pass_ok{source="archive"}
            part.result.reached = None  # an archived day is no watermark: no lag to show
            if self.metrics is not None:
                self.metrics.observe(part.result)
        with self._lock:
            self.archive_runs[zone.id] = self.archive_runs.get(zone.id, 0) + 1
        level = logging.INFO if result.ok else logging.ERROR
        damaged = ", ".join(f"{p.path} (after line {n})" for p, n in listing.damaged)
        log.log(
            level,
            "zone %s: archive: %d part(s) imported, %d failed, %d open, %d new rows%s",
            zone.id,
            sum(p.result.ok for p in result.parts),
            len(result.failed),
            len(listing.open),
            result.rows,
            f"; damaged: {damaged}" if damaged else "",
        )
        return result

    def _acquired(self, key: str, wait_seconds: float) -> None:
        """A zone just became ours: poll it as soon as its budget allows, not a whole
        interval later."""
        with self._lock:
            self._unpolled.add(key)
        with contextlib.suppress(JobLookupError, KeyError):
            when = datetime.now(UTC) + timedelta(seconds=wait_seconds)
            self.scheduler.modify_job(self._jobs[key], next_run_time=when)

    def _run_again(
        self,
        job: str,
        run: Callable[[date], None],
        day: date,
        why: str,
        at: datetime | None = None,
    ) -> None:
        """Run ``job`` again at the next compaction round (:meth:`compact_open_days`), or
        at the first from ``at`` on."""
        with self._lock:
            self._again[job] = (run, day, why, at)

    def _mine(
        self, turn: Turn, job: str, what: str, run: Callable[[date], None], day: date
    ) -> bool:
        """True if this daemon does the day's ``job`` now. Otherwise says why: done (here
        or elsewhere), or not known (the coordination not reached: the job is tried again
        at the next compaction round, so the day's job is not lost)."""
        if turn is Turn.MINE:
            return True
        if turn is Turn.DONE:
            log.info("%s for %s: %s", what, day, self.fleet.done_elsewhere)
        else:
            log.warning(
                "%s for %s: not known whether it is done (the fleet's PostgreSQL was not "
                "reached); tried again at the next compaction round",
                what,
                day,
            )
            self._run_again(job, run, day, "the fleet's PostgreSQL was not reached")
        return False

    def write_report(self, day: date | None = None) -> None:
        """Yesterday's report (or ``day``'s), made by one daemon of the fleet (another may
        retry a day's report whose daemon failed or died)."""
        day = day or (self.clock() - timedelta(days=1)).date()
        self.audit(day)  # first: the report shows the day's completeness
        job = f"report/{day}"
        try:
            if self.stop_event.is_set():
                raise StopRequested
            with self.fleet.fleet_job(job) as turn:
                if not self._mine(turn, job, "daily report", self.write_report, day):
                    return
                if self._report_writer is not None:
                    self._report_writer(day)
                else:
                    from cdnlake.reports.build import write_reports

                    paths = write_reports(self.config, day, session=self.session)
                    log.info(
                        "daily report for %s written: %s", day, ", ".join(str(p) for p in paths)
                    )
            self.report_runs.append(day)
        except StopRequested:  # not marked done: the next daemon to start makes it
            log.info(_STOPPED, "daily report for", day)
        except Exception as exc:  # the daemon must outlive a failed report
            if self.stop_event.is_set():
                log.info(_STOPPED, "daily report for", day)
            else:
                log.error("daily report for %s failed: %s", day, exc)

    def audit(self, day: date) -> None:
        """The completeness audit of ``day`` (yesterday), by one daemon of the fleet, kept
        in ``audit_days``, with each of the two days before that is short or not kept yet
        (while the provider serves it: a day pending then, or read again since, is
        corrected). A zone's day that cannot be kept yet (an hour pending: the zone is
        behind, or inside ``lag_seconds``) is said in a warning and leaves the job open,
        as does a day that cannot be audited (the statistics unreachable): this daemon
        tries it again later the same day, with backoff (:meth:`_audit_again`), as do the
        next daemon to start and the next days' audits. A day audited whose result could
        not be kept (``audit_days`` not written) is said so, not as a failed audit, and
        the job stays open: run again at the next compaction round."""
        from cdnlake.audit.days import due, unkept
        from cdnlake.audit.run import audit, keep
        from cdnlake.client.statistics import StatisticsApi

        zones = [z.id for z in self.config.zones]
        if not zones:
            return
        job = f"audit/{day}"
        try:
            if self.stop_event.is_set():
                raise StopRequested
            with self.fleet.fleet_job(job) as turn:
                if not self._mine(turn, job, "completeness audit", self.audit, day):
                    return
                now = self.clock()
                waiting: list[tuple[date, str]] = []
                for when, todo in sorted(due(self.session, zones, day, now).items()):
                    hours = audit(
                        self.config, self.session, StatisticsApi(self.api), todo, when, when, now
                    )
                    if self.stop_event.is_set():  # keep whole days, or none: not half
                        raise StopRequested
                    try:
                        days = keep(self.session, hours, now)
                    except Exception as exc:  # audited: only its bookkeeping failed
                        if self.stop_event.is_set():
                            raise StopRequested from exc
                        raise _NotKept(when, exc) from exc
                    if days and self.metrics is not None:
                        self.metrics.audited()
                    log_audit(when, days)
                    for zone, open_day, why in unkept(hours):
                        line = f"completeness audit: zone {zone} {open_day} cannot be kept yet"
                        waiting.append((open_day, f"{line} ({why})"))
                if any(open_day == day for open_day, _ in waiting):  # the job stays open
                    raise _DayOpen([line for _, line in waiting])
                for _, line in waiting:  # earlier days: the next daily audits audit them
                    log.warning("%s; the next daily audits audit it again", line)
            self.audit_runs.append(day)
            with self._lock:
                self._audit_tries.pop(day, None)
        except _DayOpen as exc:
            self._audit_again(day, "not kept yet", exc.args[0], logging.WARNING)
        except StopRequested:  # the job stays open: the next daemon to start audits it
            log.info(_STOPPED, "completeness audit of", day)
        except _NotKept as exc:  # the job stays open: the audit runs again, then keeps it
            when, error = exc.args
            log.error(
                "completeness audit of %s: audited, but not kept in audit_days (%s); the job "
                "stays open, run again at the next compaction round",
                when,
                error,
            )
            self._run_again(job, self.audit, day, "its audit was not kept")
        except Exception as exc:  # the daemon must outlive a failed audit
            if self.stop_event.is_set():
                log.info(_STOPPED, "completeness audit of", day)
            else:
                line = f"completeness audit of {day} failed: {exc}"
                self._audit_again(day, "it failed", [line], logging.ERROR)

    def _audit_again(self, day: date, why: str, lines: list[str], level: int) -> None:
        """The audit of ``day`` is not done (not kept yet, or failed): its job stays open
        and this daemon tries it again the same day (and the next, until its next daily
        audit), waiting one compaction round, then each time twice as long (up to
        ``AUDIT_RETRY_MAX``), rather than a day for the next daily audit. Said in full at
        ``level`` at the first try, in one INFO line at each try after that."""
        now = self.clock()
        with self._lock:
            tries = self._audit_tries[day] = self._audit_tries.get(day, 0) + 1
            for old in [d for d in self._audit_tries if d < day - timedelta(days=2)]:
                del self._audit_tries[old]
        wait = min(timedelta(minutes=COMPACT_MINUTES) * 2 ** (tries - 1), AUDIT_RETRY_MAX)
        at = now + wait
        if at.date() > day + timedelta(days=1):  # the next daily audit is as soon
            then = "the next daily audits audit it again"
        else:
            self._run_again(f"audit/{day}", self.audit, day, why, at)
            then = f"tried again from {at:%Y-%m-%d %H:%M} UTC"
        if tries == 1:
            for line in lines:
                log.log(level, "%s", line)
            log.log(level, "completeness audit of %s: not done (%s); %s", day, why, then)
        else:
            log.info(
                "completeness audit of %s: still not done at try %d (%s); %s", day, tries, why, then
            )

    def maintain(self, day: date | None = None) -> None:
        """Once a day (today, or ``day``), by one daemon of the fleet: compact the small
        files the passes left, checkpoint, vacuum; a zone it rewinds, it holds (in a fleet
        its lease, taken from the daemon that owns it once that one's pass ends). A damaged
        file left in place (its zone's lease not had in time) is an error, and the day's
        job stays open: this daemon runs it again at its next compaction round
        (:meth:`compact_open_days`), as would the next daemon to start."""
        from cdnlake.errors import ZoneBusyError
        from cdnlake.lake.upkeep.maintain import maintain

        day = day or self.clock().date()
        job = f"maintain/{day}"
        try:
            with self.fleet.fleet_job(job) as turn:
                if not self._mine(turn, job, "lake maintenance", self.maintain, day):
                    return
                report = maintain(
                    self.session,
                    retention_hours=self.config.retention.vacuum_hours,
                    retention=self.config.retention,
                    locks=self.config.storage.work / "locks",
                    hold=maintain_hold(self.config, self.fleet.daemon_id, self.stop_event.is_set),
                    stop=self.stop_event.is_set,
                )
                if self.metrics is not None:
                    self.metrics.observe_maintain(report)
                if report.left:  # not done: the fleet job stays open, tried again
                    self._run_again(job, self.maintain, day, "a damaged file was left")
                    raise ZoneBusyError(
                        f"{len(report.left)} damaged file(s) left in place: "
                        + "; ".join(t.line() for t in report.tables)
                    )
            self.maintain_runs += 1
            log.info("lake maintained: %s", "; ".join(t.line() for t in report.tables))
        except StopRequested:  # not done: the next daemon to start catches it up
            log.info("lake maintenance for %s stopped: the daemon is stopping", day)
        except Exception as exc:  # the daemon must outlive a failed maintenance
            log.error("lake maintenance failed: %s", exc)

    def compact_open_days(self) -> None:
        """Every ``COMPACT_MINUTES``: today's partition of each zone held here that holds
        too many small files is compacted (:class:`~cdnlake.lake.upkeep.maintain.OpenDays`), so
        files per zone-day stay bounded between nightly maintenance runs. The daily jobs
        left to run again are run first: a maintenance that left a damaged file in place,
        an audit not done, a job whose turn could not be known (each from its time on)."""
        from cdnlake.lake.upkeep.maintain import OpenDays

        now = self.clock()
        with self._lock:
            again = {j: a for j, a in self._again.items() if a[3] is None or a[3] <= now}
            for job in again:
                del self._again[job]
        for job, (run, day, why, _) in again.items():
            if self.stop_event.is_set():
                break
            log.info("%s: running it again (%s)", job, why)
            run(day)

        if self._open_days is None:
            self._open_days = OpenDays(self.session)
        day = self.clock().date()
        try:
            for spec, zones in (
                (REQUESTS, [z.id for z in self.config.zones]),
                (SHIELD_EVENTS, [z.id for z in self.config.shield_zones]),
            ):
                held = [z for z in zones if self._held_here(lease_key(spec.name, z))]
                self._open_days.compact(spec, held, day, self.stop_event.is_set)
        except StopRequested:
            return
        except Exception as exc:  # the daemon must outlive a failed compaction
            log.error("compaction of today's partitions failed: %s", exc)

    def _held_here(self, key: str) -> bool:
        with self.fleet.claim(key) as held:
            return held is not None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        if self.config.forwarding.enabled:  # first: a port it cannot take stops the start
            receiver = self.receiver = Receiver(self.config, self.session).start()
            if self.metrics is not None:
                self.metrics.forwarding(
                    lambda: (
                        dict(receiver.counts.rows_by_zone),
                        dict(receiver.counts.rejected_by_zone),
                    )
                )
        polls: list[tuple[Callable[[Any], Any], Any, str]] = [
            (self.poll_zone, zone, f"zone-{zone.id}") for zone in self.config.zones
        ]
        polls += [(self.poll_shield_zone, z, f"shield-{z.id}") for z in self.config.shield_zones]
        keys = lease_keys(self.config)  # in the order of polls
        self._jobs = {key: job_id for key, (_, _, job_id) in zip(keys, polls, strict=True)}
        # Once stopping, the fleet takes no zone: a pass would never start on it. Until
        # then, no more at a time than this daemon can start polling.
        self.fleet.start(keys, self._acquired, stopping=self.stop_event.is_set, room=self.room)
        now = datetime.now(UTC)
        for i, (poll, zone, job_id) in enumerate(polls):
            self.scheduler.add_job(
                poll,
                IntervalTrigger(seconds=self.config.schedule.poll_seconds, timezone=UTC),
                args=[zone],
                id=job_id,
                name=f"poll {job_id}",
                next_run_time=now + timedelta(milliseconds=50 * i),  # staggered first passes
            )
        archived = [z for z in self.config.zones if z.archive is not None]
        for i, zone in enumerate(archived):
            self.scheduler.add_job(
                self.pick_up_archive,
                IntervalTrigger(seconds=self.config.schedule.archive_seconds, timezone=UTC),
                args=[zone],
                id=f"archive-{zone.id}",
                name=f"archive of zone {zone.id}",
                executor="archive",
                # after the first round of polls has begun, staggered
                next_run_time=now + timedelta(seconds=2, milliseconds=50 * (len(polls) + i)),
            )
        self.scheduler.add_job(self.write_report, self._report_trigger, id="daily-report")
        self.scheduler.add_job(self.maintain, self._maintain_trigger, id="daily-maintain")
        self.scheduler.add_job(
            self.compact_open_days, self._compact_trigger, id="open-day-compaction"
        )
        started = self.clock().astimezone(UTC)
        # The day's runs as the cron would have made them (however late the first round
        # ends): the report of the day before, today's maintenance.
        days = {"report": started.date() - timedelta(days=1), "maintenance": started.date()}
        self._catch_up = [
            (run, name, days[name])
            for run, name, at in self._catch_up_at
            if started.time() >= at_time(at)
        ]
        if self._catch_up:
            self._first_round = {job_id for _, _, job_id in polls}
            self.scheduler.add_listener(self._polled, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        self.scheduler.start()
        log.info(
            "daemon started: %d zone(s) and %d shield zone(s) every %ss, report at %s UTC",
            len(self.config.zones),
            len(self.config.shield_zones),
            self.config.schedule.poll_seconds,
            self.config.schedule.report_at,
        )

    def _polled(self, event: JobExecutionEvent) -> None:
        """After every zone's first poll, the daily jobs whose time passed before the
        daemon started run once, one after the other (each a no-op where the fleet has
        done it already)."""
        with self._lock:
            if not self._first_round or event.job_id not in self._first_round:
                return
            self._first_round.discard(event.job_id)
            if self._first_round:
                return
        # Not from here: a listener runs in a worker thread, and the scheduler's shutdown
        # holds the job stores' lock while it waits for that thread, so an add_job here
        # during a stop would wait forever (and the process with it).
        threading.Thread(target=self._schedule_catch_up, name="catch-up", daemon=True).start()

    def _schedule_catch_up(self) -> None:
        if self.stop_event.is_set():
            return
        with contextlib.suppress(Exception):  # the daemon is stopping: nothing to catch up
            self.scheduler.add_job(self._run_catch_up, id="daily-catch-up", name="catch up")

    def _run_catch_up(self) -> None:
        jobs, self._catch_up = self._catch_up, []
        for run, name, day in jobs:
            if self.stop_event.is_set():
                return
            log.info("daemon started after today's %s time: catching up (%s)", name, day)
            run(day)

    def stop(self, grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS) -> bool:
        """Stop requesting pages, let passes in flight end; True if all ended in time."""
        self.stop_event.set()
        self.scheduler.pause()
        done = threading.Event()

        def shutdown() -> None:
            self.scheduler.shutdown(wait=True)
            done.set()

        threading.Thread(target=shutdown, name="daemon-shutdown", daemon=True).start()
        finished = done.wait(grace_seconds)
        if not finished:
            log.warning(
                "jobs still running after %.0fs; leaving them (a daily job left is not "
                "marked done: the next daemon to start does it again)",
                grace_seconds,
            )
        if self.receiver is not None:  # commits what it holds
            finished = self.receiver.stop() and finished
        self.fleet.stop()
        if self._own_session:
            self.session.close()
        return finished

    def run_forever(self, interrupted: threading.Event) -> None:
        self.start()
        while not interrupted.wait(1.0):
            pass


_STOPPED = "%s %s stopped: the daemon is stopping; done again at its next start"


def log_audit(day: date, days: list[Any]) -> None:
    """One line for the day's audit, and one per zone whose day is not ``ok``: a thousand
    quiet zones are one line, not a thousand."""
    if not days:
        return
    bad = [audited for audited in days if audited.verdict != "ok"]
    log.log(
        logging.ERROR if bad else logging.INFO,
        "completeness audit of %s: %d zone(s) audited, %d ok, %d not ok",
        day,
        len(days),
        len(days) - len(bad),
        len(bad),
    )
    for audited in bad:
        log.error("completeness audit: %s", audited.line())


def at_time(hh_mm: str) -> day_time:
    """``HH:MM`` (UTC, checked by the config) as a time of day."""
    hour, minute = (int(x) for x in hh_mm.split(":"))
    return day_time(hour, minute)


def daily(hh_mm: str) -> CronTrigger:
    at = at_time(hh_mm)
    return CronTrigger(hour=at.hour, minute=at.minute, timezone=UTC)


def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
