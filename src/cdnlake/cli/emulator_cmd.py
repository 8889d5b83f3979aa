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
        help="ID[:v2|v1|extended|disabled|suspended|fullip|signed],... (default: the demo zones, "
        "1234:v2:extended,1235:v1,1236:v2)",
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
    faults.add_argument("--fault-seed", type=int, default=0, help="seed of the fault dice")


def build_config(args: argparse.Namespace) -> Any:
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
        for z in config.zones.values()
    )
    print(f"cdnlake emulator listening on {emu.url}", flush=True)
    print(f"zones: {zones}; rate {config.rate_limit}/{config.rate_window:g}s per zone", flush=True)
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
