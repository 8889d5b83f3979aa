"""``cdnlake emulator``: the provider's API on loopback."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import sys
import time
from datetime import datetime
from typing import Any

from cdnlake.errors import UsageError


def _rate(text: str) -> tuple[int, float]:
    match = re.fullmatch(r"(\d+)/(\d+(?:\.\d+)?)", text)
    if not match or int(match.group(1)) < 1 or float(match.group(2)) <= 0:
        raise argparse.ArgumentTypeError(f"expected REQUESTS/SECONDS such as 30/10, got {text!r}")
    return int(match.group(1)), float(match.group(2))


def _zone_rate(text: str) -> tuple[int, float, datetime | None]:
    match = re.fullmatch(r"(\d+)=(\d+(?:\.\d+)?)/s(?:@(.+))?", text.strip())
    if not match or int(match.group(1)) < 1 or float(match.group(2)) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected ZONE=REQUESTS/s[@SINCE] such as 1234=10000/s, got {text!r}"
        )
    since = None
    if match.group(3):
        try:
            since = datetime.fromisoformat(match.group(3).replace("Z", "+00:00"))
        except ValueError:
            since = None
        if since is None or since.tzinfo is None:
            raise argparse.ArgumentTypeError(
                f"expected an ISO-8601 instant with a time zone after @, got {text!r}"
            )
    return int(match.group(1)), float(match.group(2)), since


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0..65535, got {text!r}")
    return int(text)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _count1(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The emulator's options. Every command builds this parser, so nothing of the
    emulator itself is imported here (its zones default is resolved when it runs)."""
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument(
        "--port", type=_port, default=8765, help="port, 0 for any free one (default 8765)"
    )
    p.add_argument("--seed", type=int, default=1, help="traffic seed (default 1)")
    p.add_argument(
        "--access-key",
        default=None,
        help="accepted access key (default: $CDNLAKE_ACCESS_KEY, else demo-key)",
    )
    p.add_argument("--bearer-token", default=None, help="also accept this Bearer token")
    p.add_argument(
        "--zones",
        default=None,
        help="ID[:v2|v1|extended|disabled|suspended|archived|fullip|signed],... (default: "
        "the demo zones, 1234:v2:extended,1235:v1,1236:v2); archived: permanent log storage "
        "on, with --archive-days of history; fullip: whole client addresses; signed: some "
        "URLs with token authentication",
    )
    p.add_argument(
        "--shield-zones",
        default="5001,5002",
        help="shield zone ids served by the shield endpoints (default 5001,5002)",
    )
    p.add_argument("--rate", type=_rate, default=(30, 10.0), help="per-zone limit (default 30/10)")
    p.add_argument("--rpm", type=_positive, default=20.0, help="mean requests per minute per zone")
    p.add_argument(
        "--zone-rate",
        type=_zone_rate,
        action="append",
        default=[],
        metavar="ZONE=N/s[@SINCE]",
        help="a sustained rate for one of --zones: N requests per second, made on demand "
        "second by second, from SINCE (ISO-8601) or else the emulator's start on (repeat "
        "for more zones)",
    )
    p.add_argument(
        "--forward-delay",
        default="0",
        metavar="SECONDS|LOW-HIGH",
        help="push each request of a zone with log forwarding set this long after it "
        "happened, a delay of its own within LOW-HIGH (the provider: 10-30; default 0)",
    )
    archive = p.add_argument_group("permanent log storage (zones marked :archived)")
    archive.add_argument(
        "--archive-days",
        type=_count,
        default=30,
        help="UTC days of history before the start (default 30)",
    )
    archive.add_argument(
        "--archive-legacy-days",
        type=_count,
        default=7,
        help="the first days of history named in the older scheme <dd>_<n>.gzip (default 7)",
    )
    archive.add_argument(
        "--archive-max-lines", type=_count1, default=5_000_000, help="a part closes at (5000000)"
    )
    archive.add_argument(
        "--archive-max-bytes",
        type=_count1,
        default=2_000_000_000,
        help="...or at this many bytes of lines (2000000000)",
    )
    archive.add_argument(
        "--archive-max-open", type=_positive, default=7200.0, help="...or open this long, s (7200)"
    )
    archive.add_argument(
        "--archive-idle", type=_positive, default=3600.0, help="...or idle this long, s (3600)"
    )
    archive.add_argument(
        "--archive-flush",
        type=_positive,
        default=60.0,
        help="writers append what arrived every this many seconds (60)",
    )
    p.add_argument("--now", help="start the clock at this ISO-8601 instant")
    p.add_argument("--frozen", action="store_true", help="freeze the clock (with --now)")
    faults = p.add_argument_group("fault switches (shares of logging requests, 0..1)")
    faults.add_argument("--error-rate", type=_share, default=0.0, help="500s (JSON and HTML)")
    faults.add_argument("--spurious-429-rate", type=_share, default=0.0, help="extra 429s")
    faults.add_argument(
        "--retry-after",
        choices=["positive", "zero", "absent", "mixed"],
        default="mixed",
        help="Retry-After of spurious 429s",
    )
    faults.add_argument("--slow-rate", type=_share, default=0.0, help="slow answers")
    faults.add_argument("--slow-seconds", type=_seconds, default=2.0, help="delay of slow answers")
    faults.add_argument("--drop-rate", type=_share, default=0.0, help="dropped connections")
    faults.add_argument("--truncate-rate", type=_share, default=0.0, help="bodies cut in half")
    faults.add_argument("--malformed-rate", type=_share, default=0.0, help="v2 bodies not JSON")
    faults.add_argument(
        "--bad-record-rate",
        type=_share,
        default=0.0,
        help="v2 records served spoiled (a timestamp that is no time or a status code "
        "of the wrong type) and shield events (a timestamp that is text), always the same ones",
    )
    faults.add_argument(
        "--lose-hour",
        action="append",
        default=[],
        metavar="ZONE@YYYY-MM-DDTHH",
        help="the logging API (v1 and v2) serves no record of this UTC hour of this zone, "
        "while /statistics still counts them (repeat for more)",
    )
    for name, what in (
        ("cut", "stored cut short (a gzip stream that ends early)"),
        ("bad-lines", "holding two lines that are no log lines"),
        ("bad-checksum", "listed with a Checksum that does not match"),
        ("corrupt-once", "served corrupted on its first download"),
    ):
        faults.add_argument(
            f"--archive-{name}",
            action="append",
            default=[],
            metavar="PATTERN",
            help=f"archived parts {what}: a pattern on <zone name>/<YYYY>/<MM>/<file> "
            "(repeat for more)",
        )
    faults.add_argument(
        "--storage-cut-after",
        type=_count,
        default=0,
        metavar="BYTES",
        help="every storage zone download breaks off after this many bytes (0: never)",
    )
    faults.add_argument("--fault-seed", type=int, default=0, help="seed of the fault dice")


def build_config(args: argparse.Namespace) -> Any:
    from cdnlake.emulator.archive import ArchiveLimits
    from cdnlake.emulator.forwarding import Delay
    from cdnlake.emulator.server import DEMO_ZONES, EmulatorConfig, parse_zones
    from cdnlake.emulator.state import Faults

    try:
        zones = parse_zones(args.zones or DEMO_ZONES)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    now = None
    if args.now:
        try:
            now = datetime.fromisoformat(args.now.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"--now: not an ISO-8601 instant: {args.now!r}") from None
        if now.tzinfo is None:
            raise UsageError("--now: give a time zone, e.g. 2026-11-20T12:00:00Z")
    start_ms = int((now.timestamp() if now else time.time()) * 1000)
    for zone_id, per_second, since in args.zone_rate:
        if zone_id not in zones:
            raise UsageError(f"--zone-rate: zone {zone_id} is not one of --zones")
        since_ms = int(since.timestamp() * 1000) if since is not None else start_ms
        zones[zone_id] = dataclasses.replace(
            zones[zone_id], per_second=per_second, since_ms=since_ms
        )
    try:
        faults = Faults(
            error_rate=args.error_rate,
            spurious_429_rate=args.spurious_429_rate,
            retry_after=args.retry_after,
            slow_rate=args.slow_rate,
            slow_seconds=args.slow_seconds,
            drop_rate=args.drop_rate,
            truncate_rate=args.truncate_rate,
            malformed_rate=args.malformed_rate,
            bad_record_rate=args.bad_record_rate,
            lose_hours=",".join(args.lose_hour),
            archive_cut=",".join(args.archive_cut),
            archive_bad_lines=",".join(args.archive_bad_lines),
            archive_bad_checksum=",".join(args.archive_bad_checksum),
            archive_corrupt_once=",".join(args.archive_corrupt_once),
            storage_cut_after=args.storage_cut_after,
            seed=args.fault_seed,
        )
    except ValueError as exc:
        raise UsageError(str(exc).replace("lose_hours", "--lose-hour", 1)) from None
    try:
        delay = Delay.parse(args.forward_delay)
    except ValueError as exc:
        raise UsageError(f"--forward-delay: {exc}") from None
    key = args.access_key or os.environ.get("CDNLAKE_ACCESS_KEY") or "demo-key"
    try:
        shield = tuple(int(z) for z in args.shield_zones.split(",") if z.strip())
    except ValueError:
        raise UsageError(
            f"--shield-zones: expected ids like 5001,5002, got {args.shield_zones!r}"
        ) from None
    return EmulatorConfig(
        host=args.host,
        port=args.port,
        seed=args.seed,
        access_key=key,
        bearer_token=args.bearer_token,
        zones=zones,
        rate_limit=args.rate[0],
        rate_window=args.rate[1],
        rpm=args.rpm,
        faults=faults,
        now=now,
        frozen=args.frozen,
        shield_zones=shield,
        forward_delay=delay,
        archive_days=args.archive_days,
        archive_legacy_days=args.archive_legacy_days,
        archive_limits=ArchiveLimits(
            max_lines=args.archive_max_lines,
            max_bytes=args.archive_max_bytes,
            max_open_seconds=args.archive_max_open,
            idle_seconds=args.archive_idle,
            flush_seconds=args.archive_flush,
        ),
    )


def emulator(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import setup_logging
    from cdnlake.emulator.server import Emulator

    setup_logging(args.log_level or "WARNING", args.log_format or "text")
    config = build_config(args)
    emu = Emulator(config)
    try:
        emu.start()
    except OSError as exc:
        raise UsageError(
            f"emulator: cannot listen on {args.host}:{args.port}: {exc.strerror}"
        ) from None
    zones = ", ".join(
        f"{z.id}{' (extended)' if z.extended else ''}{' (disabled)' if z.disabled else ''}"
        f"{f' ({z.per_second:g}/s)' if z.per_second else ''}"
        f"{' (archived)' if z.archived else ''}"
        for z in config.zones.values()
    )
    print(f"cdnlake emulator listening on {emu.url}", flush=True)
    print(f"zones: {zones}; rate {config.rate_limit}/{config.rate_window:g}s per zone", flush=True)
    for store in config.storage_zones:
        print(
            f"storage zone {store.name} (id {store.id}) at {emu.storage_url}: password "
            f"{store.password}, read-only {store.read_only_password} (emulated values)",
            flush=True,
        )
    stop = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not stop:
        signal.pause() if hasattr(signal, "pause") else None
    emu.stop()
    print("cdnlake emulator stopped", file=sys.stderr)
    return 0
