"""``cdnlake api AREA ACTION``: the management API areas, JSON on stdout."""

from __future__ import annotations

import argparse

from cdnlake.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("area", nargs="?", help="shield, compute, pullzone, video, dns, containers")
    p.add_argument("action", nargs="?", help="what to do in that area")


def api(args: argparse.Namespace) -> int:
    raise UsageError("api: the management API areas are not available yet (planned)")
