"""``cdnlake forget``: erase one client's rows (``--ip``) or one request (``--request-id``)."""

from __future__ import annotations

import argparse
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from cdnlake.cli.common import interruptible, load, require_writable_root, say
from cdnlake.config import Config
from cdnlake.errors import ConfigError, StopRequested, UsageError

if TYPE_CHECKING:
    from cdnlake.lake.personal.forget import ForgetReport, Target
    from cdnlake.privacy import PrivacyPolicy


def forget(args: argparse.Namespace) -> int:
    from cdnlake.cli.lake_cmd import refuse_beside_daemon, writers_held, writing
    from cdnlake.ingest.scratch import remove_stale_downloads
    from cdnlake.lake.personal.forget import Target, leaves_storage
    from cdnlake.lake.personal.forget import forget as run_forget
    from cdnlake.lake.zone.erasures import lost_names
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy

    config = load(args, default_level="WARNING")
    zones = tuple(args.zone or ())
    if zones:
        config.select_all_zones(list(zones))  # unknown ids are refused
    target = Target(
        ip=args.ip,
        request_id=args.request_id,
        zones=zones,
        from_day=_day("--from", args.from_day),
        to_day=_day("--to", args.to_day),
    )
    _check_key(config)
    require_writable_root(config)
    if args.vacuum_now:
        refuse_beside_daemon(config, "forget --vacuum-now")  # before any work
    now = datetime.now(UTC)
    policy = PrivacyPolicy.from_config(config.privacy)
    with (
        interruptible("forget") as stop,
        LakeSession.from_config(
            config.storage,
            privacy=policy,
        ) as session,
        writers_held(session, config, "forget --vacuum-now", stop.is_set)
        if args.vacuum_now
        else writing(config, "forget", stop.is_set),
    ):
        try:
            report = stop.run(
                lambda: run_forget(
                    session,
                    target,
                    now,
                    stored=policy.stored_as,
                    vacuum_now=args.vacuum_now,
                    stop=stop.is_set,
                    zones_known=tuple(zone.id for zone in config.zones),
                    shield_zones_known=tuple(zone.id for zone in config.shield_zones),
                    # --vacuum-now holds every zone's lock already
                    locks=None if args.vacuum_now else config.storage.work / "locks",
                    replaces_lost=args.replaces_lost,
                ),
                on_abandon=lambda: say(_stopped(stop.signal)),
            )
        except StopRequested:
            say(_stopped(stop.signal))
            return 1
    leftovers = remove_stale_downloads(config.storage.work)
    for line in _outcome(target, report, policy):
        print(line)
    if report.lost:
        lost = lost_names(sorted(report.lost))
        print(
            f"recorded in place of the lost {lost} (--replaces-lost): their marks stop no "
            "zone's rows any more"
            if args.replaces_lost
            else f"LOST: the erasure marks name {lost}, which the relation erasures does not "
            "hold: the zones' rows stay refused until each is run again with --replaces-lost"
        )
    if report.quarantined:
        print(
            f"NOT SEARCHED: {report.quarantined} damaged file(s) set aside in _quarantine/ "
            "for these zones (they do not decode): `cdnlake maintain --restore` puts back "
            "those that do, without the erased rows; then run this again, and delete the "
            "rest by hand"
        )
    if leftovers:
        print(
            f"removed {leftovers} raw log file(s) a killed read left in "
            f"{config.storage.work / 'downloads'} (on this machine)"
        )
    if report.vacuumed:
        print("the old bytes have left storage (--vacuum-now)")
    else:
        hours = config.retention.vacuum_hours
        when = leaves_storage(report.erased_at, hours, config.schedule.maintain_at)
        print(
            f"the old bytes leave storage at the first `cdnlake maintain` from "
            f"{when:%Y-%m-%d %H:%M} UTC on (retention.vacuum_hours = {hours}; the daemon "
            f"maintains daily at {config.schedule.maintain_at} UTC); --vacuum-now removes "
            "them at once"
        )
    return 0


def _outcome(target: Target, report: ForgetReport, policy: PrivacyPolicy) -> list[str]:
    """What the erasure removed and matched, and how it is recorded: never the address,
    but the network its rows held where they held one (the erasure covers all of it)."""
    per_zone = ", ".join(f"zone {z}: {n}" for z, n in sorted(report.requests.items()))
    days = ", ".join(d.isoformat() for d in sorted(report.days)) or "none"
    removed = sum(report.requests.values())
    if target.ip is None:
        what = "request"
    elif report.networks:
        what = "request(s) of that address's network"
    else:
        what = "request(s) of that address"
    lines = [
        f"erasure {report.erasure_id}: {removed} {what} removed"
        + (f" ({per_zone})" if per_zone else "")
        + f"; days: {days}; {report.shield} shield event(s), {report.rejected} rejected "
        f"line(s); {report.files} file(s) rewritten"
    ]
    if target.ip is None:
        lines.append(
            "recorded in the relation erasures as a keyed hash of the request id (never the "
            "id itself); from now on that request is not stored again, whenever it is read "
            "(a rejected line holding the id is not kept)"
        )
        return lines
    if report.matched:
        lines.append("matched as stored: " + ", ".join(sorted(report.matched)))
    for network in sorted(report.networks):
        lines.append(
            f"the rows held the network {network}, not single addresses: this erasure "
            "removed the requests of every client in it"
        )
    lines.append(
        f"from now on it holds back, up to {report.erased_at:%Y-%m-%d %H:%M:%S} UTC: that "
        "address's requests under any [privacy] setting (by the address as received or as "
        "stored)"
        + "".join(
            f"; every request stored as the network {n} or its keyed hash in zone(s) "
            f"{', '.join(str(z) for z in sorted(zones))} (its rows there were stored so: "
            "everyone in it)"
            for n, zones in sorted(report.held_as_stored.items())
        )
        + "".join(
            f"; requests received as the network {n} (anonymised by the provider)"
            + (" in other zones" if n in report.held_as_stored else "")
            + ", not those of other clients in it"
            for n in sorted(report.held_as_received)
        )
    )
    networks = " or a network named above" if report.held_as_received else ""
    lines.append(
        f"and, whatever their time, the rejected lines whose raw text holds that address{networks}"
        + "".join(
            f" (or, in zone(s) stored as it, while [privacy] truncates to it, any address in {n})"
            for n in sorted(report.held_as_stored)
        )
    )
    if policy.ip == "drop":
        lines.append(
            '[privacy] ip = "drop": client addresses are not stored, so no request stored '
            "under it holds one; only rows stored before that setting could match"
        )
    lines.append("recorded in the relation erasures (the address as a keyed hash, never itself)")
    return lines


def _stopped(signal: str | None) -> str:
    return (
        f"cdnlake: interrupted ({signal}): forget stopped between zones; the erasure is "
        "recorded and each zone done is whole; run the same forget again to finish"
    )


def _day(option: str, text: str | None) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"forget {option}: expected a day YYYY-MM-DD, got {text!r}") from None


def _check_key(config: Config) -> None:
    """In a fleet, every daemon must hold the key that hashes erased addresses and request
    ids, or the ones elsewhere could not match them (and refuse the zones' rows): the key
    must come from the environment."""
    if config.coordination.enabled and config.privacy.hash_key is None:
        raise ConfigError(
            "privacy.hash_key_env: forget in a fleet needs the NAME of a set environment "
            "variable holding a key every daemon shares (an erased address or request id is "
            "kept as a keyed hash under it)"
        )
