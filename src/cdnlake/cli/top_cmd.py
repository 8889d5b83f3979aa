"""``cdnlake top``: the last minute, 5 minutes or hour of requests, live in the terminal.

On a terminal, a screen refreshed every ``--interval`` seconds, driven by single keys;
Ctrl-C (or SIGTERM, SIGHUP) leaves it as ``q`` does, the terminal's modes and screen put
back. On a pipe, or with ``--once``, one snapshot as a table or JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdnlake.reports.top import ViewState
    from cdnlake.warehouse.live import LiveView


def add_arguments(p: argparse.ArgumentParser, zone_id: Any, once: Any) -> None:
    from cdnlake.warehouse.live import SORTS, WINDOWS

    p.add_argument(
        "--zone", type=zone_id, action=once, metavar="ID", help="one pull zone (default: all)"
    )
    p.add_argument(
        "--window", choices=list(WINDOWS), default="1m", help="the last 1m, 5m or 1h (key w)"
    )
    p.add_argument(
        "--sort", choices=list(SORTS), default="requests", help="rank the keys by (key s)"
    )
    p.add_argument(
        "--interval",
        type=seconds,
        default=1.0,
        metavar="SECONDS",
        help="seconds between refreshes (default 1)",
    )
    p.add_argument(
        "--once", action="store_true", help="print one snapshot and exit (so does a pipe)"
    )
    p.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="the snapshot's format with --once or on a pipe",
    )


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds from 0.1 to 3600, got {text!r}")
    return value


def top(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import load
    from cdnlake.errors import ConfigError, NoLakeError
    from cdnlake.lake.zone.session import LakeSession
    from cdnlake.privacy import PrivacyPolicy
    from cdnlake.reports.top import ViewState, snapshot_json, snapshot_table
    from cdnlake.warehouse.live import LiveView

    config = load(args, default_level="WARNING")
    if not config.zones:
        raise ConfigError("zones: no [[zones]] configured; `cdnlake top` needs a pull zone")
    if args.zone is not None:
        config.zone(args.zone)  # one line naming the configured zones if not one of them
    zones = [z.id for z in config.zones]
    state = ViewState(args.window, args.sort, args.zone, zones)
    live = not args.once and sys.stdout.isatty() and sys.stdin.isatty()
    privacy = PrivacyPolicy.from_config(config.privacy)
    with LakeSession.from_config(config.storage, privacy=privacy) as session:
        view = LiveView(session, zones, config.report.hit_statuses)
        try:
            if live:
                return _live(view, state, args.interval)
            if not view.holds_rows():
                raise NoLakeError(
                    f"no requests in the lake at {config.storage.lake_location} yet (run "
                    "`cdnlake ingest` or the daemon first, or check storage.root in the config)"
                )
            snap = view.snapshot(state.window, state.sort, state.zone)
            text = snapshot_json(snap) if args.format == "json" else snapshot_table(snap)
            sys.stdout.write(text)
            sys.stdout.flush()
            return 0
        finally:
            view.close()


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _live(view: LiveView, state: ViewState, interval: float) -> int:
    """The screen until ``q`` (exit 0) or Ctrl-C, SIGTERM, SIGHUP (KeyboardInterrupt: the
    CLI's exit 1). Keys are read one at a time (cbreak: no echo, Ctrl-C still a signal);
    a resize redraws at once. Whatever ends it, the terminal's modes are put back and the
    screen it showed before comes back (rich's alternate screen)."""
    import select
    import signal
    import termios
    import tty

    from rich.console import Console
    from rich.live import Live

    from cdnlake.errors import CdnlakeError
    from cdnlake.reports.top import screen

    console = Console(highlight=False)
    ascii_only = not (console.encoding or "").lower().startswith("utf")
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)

    def on_resize(signum: int, frame: object) -> None:
        try:
            os.write(wake_write, b"r")
        except OSError:  # the pipe is full: a redraw is due anyway
            pass

    handlers = {
        signal.SIGWINCH: on_resize,
        signal.SIGTERM: _stop,
        signal.SIGHUP: _stop,
    }
    previous = {s: signal.signal(s, h) for s, h in handlers.items()}
    try:
        tty.setcbreak(fd)
        with Live(console=console, screen=True, auto_refresh=False, transient=True) as shown:
            snap = None
            note = ""
            due = 0.0
            while True:
                if time.monotonic() >= due:
                    began = time.monotonic()
                    try:
                        snap = view.snapshot(state.window, state.sort, state.zone)
                        note = "" if view.holds_rows() else "no requests in the lake yet"
                    except CdnlakeError as exc:  # the store failed: said, tried again
                        note = f"not refreshed: {exc}"
                    # A refresh slower than half the interval (an hour of a busy zone)
                    # waits twice what it took: top never takes the machine.
                    took = time.monotonic() - began
                    due = time.monotonic() + max(interval, 2 * took)
                width, height = console.size
                shown.update(
                    screen(snap, state, width, height, ascii_only=ascii_only, note=note),
                    refresh=True,
                )
                wait = max(0.0, due - time.monotonic())
                ready, _, _ = select.select([fd, wake_read], [], [], wait)
                if wake_read in ready:
                    os.read(wake_read, 64)
                if fd in ready:
                    keys = os.read(fd, 64).decode("utf-8", "replace")
                    before = (state.window, state.sort, state.zone)
                    for key in keys:
                        if not state.press(key):
                            return 0
                    if (state.window, state.sort, state.zone) != before:
                        due = 0.0  # another window, sort or zone: read it now
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        for s, h in previous.items():
            signal.signal(s, h)
        os.close(wake_read)
        os.close(wake_write)
