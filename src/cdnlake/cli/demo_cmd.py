"""``cdnlake demo``: emulator + ingest + report, then where the report is."""

from __future__ import annotations

import argparse


def demo(args: argparse.Namespace) -> int:
    from cdnlake.cli.common import is_tty, load, require_writable_root
    from cdnlake.cli.ingest_cmd import LineProgress, RichProgress, print_notes
    from cdnlake.demo import run_demo
    from cdnlake.warehouse.output import render

    config = load(args, default_level="WARNING")
    require_writable_root(config)  # one line naming the folder, not a traceback per zone
    print(f"cdnlake demo: emulator on loopback, storage in {config.storage.root}", flush=True)
    progress = RichProgress(list(config.zones)) if is_tty() else LineProgress()
    with progress:
        result = run_demo(config, progress)
    print_notes(result.results)
    rows = [
        (
            z["pull_zone_id"],
            f"{z['requests']:,}",
            f"{z['request_hit_ratio_pct']:.1f}%",
            f"{z['byte_hit_ratio_pct']:.1f}%",
            f"{z['rate_4xx_pct']:.2f}%",
            f"{z['rate_5xx_pct']:.2f}%",
        )
        for z in result.summary
    ]
    day = result.report_paths[0].name.split("-", 2)[2][:10] if result.report_paths else "?"
    print(f"\nYesterday ({day} UTC) per zone:")
    print(
        render(
            "table",
            ["zone", "requests", "hit ratio (req)", "hit ratio (bytes)", "4xx", "5xx"],
            rows,
        ),
        end="",
    )
    html = [p for p in result.report_paths if p.suffix == ".html"]
    print(f"\nReport: {html[0] if html else '(none)'}")
    print(f'Try:    {command_name()} sql "SELECT cache_status, count(*) FROM requests GROUP BY 1"')
    return 0 if all(r.ok for r in result.results) else 1


def command_name() -> str:
    """How to run this cdnlake again from here: ``cdnlake`` when that is on PATH and is
    this one, else the path it was started by (``.venv/bin/cdnlake`` under ``make demo``)."""
    import os
    import shutil
    import sys

    started = sys.argv[0] if os.path.basename(sys.argv[0]) == "cdnlake" else None
    on_path = shutil.which("cdnlake")
    if on_path and (started is None or os.path.samefile(on_path, started)):
        return "cdnlake"
    if started is not None:
        return short_path(started)
    beside = os.path.join(os.path.dirname(sys.executable), "cdnlake")  # python -m cdnlake
    if os.path.isfile(beside):
        return short_path(beside)
    return f"{short_path(sys.executable)} -m cdnlake"


def short_path(path: str) -> str:
    """``path`` relative to here when below here, else absolute."""
    import os

    relative = os.path.relpath(os.path.abspath(path))
    if relative.startswith(".."):
        return os.path.abspath(path)
    return relative if os.sep in relative else f"./{relative}"
