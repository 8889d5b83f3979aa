"""``cdnlake`` command line: a thin layer over the library.

Only this layer turns errors into messages and exit codes: 0 all done, 1 some work failed
(what succeeded is kept), 2 bad usage or configuration. Heavy libraries are imported by
the command that needs them, so ``cdnlake --help`` starts fast.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from cdnlake.cli.sql_common import DEFAULT_TABLE_ROWS
from cdnlake.errors import CdnlakeError, ConfigError, RequestValidationError, UsageError
from cdnlake.version import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# The optional extras (pyproject.toml): a module they install -> the extra's name.
EXTRAS = {"sqlglot": "spark", "pyspark": "spark", "psycopg": "postgres"}
# The levels log.level takes in the file (cdnlake.config.LOG_LEVELS, not imported here so
# that --help starts fast; a test keeps them equal).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# What shtab completes an option's value with (shtab.FILE, without importing shtab here).
FILE = {"bash": "_shtab_compgen_files", "zsh": "_files"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message}")


class Once(argparse.Action):
    """An option that takes one value: given twice, it is refused (argparse would keep
    the last in silence: ``import-v1 --zone 1234 --zone 1235`` imported into 1235)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) not in (None, self.default):
            before = getattr(namespace, self.dest)
            parser.error(f"{option_string} given twice ({before} and {values}): give it once")
        setattr(namespace, self.dest, values)


def _command(sub: Any, name: str, help_text: str, func: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help_text, description=help_text, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.set_defaults(func=func)
    return parser


def zone_id(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive pull zone id, got {text!r}")
    return int(text)


def whole_number(unit: str) -> Callable[[str], int]:
    """An argparse type: a whole number >= 0 of ``unit`` (named in the error)."""

    def parse(text: str) -> int:
        if not text.isdigit():
            raise argparse.ArgumentTypeError(
                f"expected a whole number of {unit} >= 0, got {text!r}"
            )
        return int(text)

    parse.__name__ = unit  # argparse names the type in some messages
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cdnlake",
        description="Turns a CDN's request logs into an analytics lake "
        "(Delta Lake tables, DuckDB or Spark) with cache and error reports.",
    )
    parser.add_argument("--version", action="version", version=f"cdnlake {__version__}")
    config = parser.add_argument(
        "--config",
        metavar="PATH",
        help="config file (default: $CDNLAKE_CONFIG, else ./config.toml)",
    )
    config.complete = FILE  # type: ignore[attr-defined]
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help="log level (default: log.level from the config)",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="log lines for people (text) or one JSON object per line (default: log.format)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = _command(
        sub,
        "ingest",
        "One ingestion pass: every configured zone (or those named) up to now - lag.",
        "cdnlake.cli.ingest_cmd:ingest",
    )
    p.add_argument(
        "--zone",
        type=zone_id,
        action="append",
        metavar="ID",
        help="only this zone, pull or shield (repeat for more)",
    )
    p.add_argument(
        "--from",
        dest="span_from",
        action=Once,
        metavar="TIME",
        help="with --to and one --zone: read this past span again (e.g. 2026-11-23T05:00Z), "
        "storing what the lake lacks; the zone's watermark does not move",
    )
    p.add_argument(
        "--to", dest="span_to", action=Once, metavar="TIME", help="end of the span (excluded)"
    )

    p = _command(
        sub,
        "import-v1",
        "Parse local v1 day files (plain or .gz) into the lake; - reads one from\n"
        "standard input. Lines that cannot be parsed go to the rejected_lines relation.",
        "cdnlake.cli.ingest_cmd:import_v1",
    )
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="a v1 day file of the zone, plain or gzip (- : standard input, once); a file "
        "of another zone is refused before anything is stored",
    )
    p.add_argument(
        "--zone", type=zone_id, required=True, action=Once, metavar="ID", help="pull zone id"
    )

    p = _command(
        sub,
        "backfill",
        "Import a zone's archived parts (the provider's permanent log storage) for those\n"
        "days (default: every day the archive holds); each closed part once, open ones\n"
        "left for later.",
        "cdnlake.cli.backfill_cmd:backfill",
    )
    p.add_argument(
        "--zone", type=zone_id, required=True, action=Once, metavar="ID", help="pull zone id"
    )
    p.add_argument(
        "--from", dest="from_day", action=Once, metavar="YYYY-MM-DD", help="first UTC day"
    )
    p.add_argument("--to", dest="to_day", action=Once, metavar="YYYY-MM-DD", help="last UTC day")

    p = _command(
        sub, "daemon", "Run the scheduler until SIGINT / SIGTERM.", "cdnlake.cli.daemon_cmd:daemon"
    )

    p = _command(
        sub,
        "status",
        "Per zone: lag, last run and health (--wide: watermark, rows today, gaps, ...),\n"
        "under the lake and storage root read.\n"
        "Exits 1 when a zone is failing or behind by more than status.max_lag_seconds.",
        "cdnlake.cli.status_cmd:status",
    )
    p.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table: for people (default); json: every field of every zone, as /healthz",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="every column (watermark, freshest row, rejected, rows today, gaps, owner, "
        "forwarding), as many as the terminal fits; the default table fits 80 columns",
    )
    p.add_argument(
        "--max-lag",
        type=whole_number("seconds"),
        metavar="SECONDS",
        help="override status.max_lag_seconds",
    )

    from cdnlake.warehouse.relations import RELATIONS

    p = _command(
        sub,
        "sql",
        "Run SQL on the lake's relations, or a named query from sql/ with\n"
        "--query NAME --param key=value. The relations:\n"
        + textwrap.fill(", ".join(RELATIONS), 78, initial_indent="  ", subsequent_indent="  ")
        + ".\nWith no SQL: an interactive shell on a terminal (.help lists its commands),\n"
        "else the SQL on standard input.",
        "cdnlake.cli.sql_cmd:sql",
    )
    p.add_argument(
        "query",
        nargs="?",
        metavar="QUERY",
        help="SQL text (one or more statements; the last one's result is printed), "
        "or - to read it from standard input",
    )
    p.add_argument("--file", metavar="PATH", help="read the SQL from this file").complete = FILE  # type: ignore[attr-defined]
    p.add_argument("--query", dest="named", metavar="NAME", help="run a named query from sql/")
    p.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE", help="named query parameter"
    )
    _slice_options(p, "with --query: ")
    p.add_argument("--list", action="store_true", help="list the named queries and parameters")
    p.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="table: for people, fit to the terminal (default); csv, json: every row and "
        "column, for programs",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="a table shows every column, however wide the terminal (default: the columns "
        "that do not fit are left out, and named)",
    )
    p.add_argument(
        "--limit",
        type=whole_number("rows"),
        default=None,
        metavar="N",
        help=f"rows a table shows (default {DEFAULT_TABLE_ROWS}; 0: all); csv and json write all",
    )
    _engine_option(p)

    p = _command(
        sub,
        "report",
        "Write the daily report of one UTC day (default: yesterday), or with --from/--to\n"
        "the report of a range of days (a daily trend of requests, bandwidth, hit ratios\n"
        "and error rates).",
        "cdnlake.cli.report_cmd:report",
    )
    p.add_argument("--date", action=Once, metavar="YYYY-MM-DD", help="UTC day (default: yesterday)")
    p.add_argument(
        "--from", dest="from_day", action=Once, metavar="YYYY-MM-DD", help="first day of a range"
    )
    p.add_argument(
        "--to", dest="to_day", action=Once, metavar="YYYY-MM-DD", help="last day of a range"
    )
    p.add_argument(
        "--zone", type=zone_id, action=Once, metavar="ID", help="one zone (default: all)"
    )
    p.add_argument(
        "--format",
        action=Once,
        metavar="FORMATS",
        help="comma list of html,csv,json,md (default: config)",
    )
    p.add_argument(
        "--out", action=Once, metavar="DIR", help="output folder (default: <root>/reports)"
    )
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="name every file written (default: the folder and the formats, in a line)",
    )
    _slice_options(p, "")
    p.add_argument(
        "--compare",
        action=Once,
        choices=["previous", "week"],
        help="add to every table and chart the change against the previous period of the "
        "same length (previous) or the same days a week before (week)",
    )
    _engine_option(p)

    p = _command(
        sub,
        "migrate-lake",
        "Convert a lake of hour files (an earlier cdnlake) into Delta tables, with its\n"
        "watermarks and bookkeeping. Lossless, and idempotent: running it twice is harmless.",
        "cdnlake.cli.lake_cmd:migrate_lake",
    )

    p = _command(
        sub,
        "maintain",
        "Remove what [retention] no longer keeps, compact small files, checkpoint and\n"
        "vacuum the lake's Delta tables (the daemon does this once a day); --restore puts\n"
        "back what was set aside.",
        "cdnlake.cli.lake_cmd:maintain",
    )
    p.add_argument(
        "--zone",
        type=zone_id,
        action="append",
        metavar="ID",
        help="compact only this zone's partitions (repeat for more)",
    )
    p.add_argument(
        "--retention-hours",
        type=whole_number("hours"),
        default=None,
        metavar="H",
        help="keep data files older versions need for this long (default: "
        "retention.vacuum_hours, 168)",
    )
    p.add_argument(
        "--check-all",
        action="store_true",
        help="read every data file (default: those the provider could still serve again)",
    )
    p.add_argument(
        "--restore",
        action="store_true",
        help="only put back the files set aside in <lake>/_quarantine that decode, less the "
        "rows the table holds already (of --zone's zones, if given); exit 1 if one stays",
    )
    p.add_argument(
        "--apply-privacy",
        action="store_true",
        help="first rewrite the rows (and rejected lines) stored under a weaker [privacy] "
        "setting than the configured one, then maintain as usual; exit 1 if a zone's rows "
        "cannot be rewritten (each such zone is named: run it again)",
    )
    p.add_argument(
        "--vacuum-now",
        action="store_true",
        help="then delete every file the tables removed from storage now (default: at the "
        "first vacuum past retention.vacuum_hours); only while no other process writes the "
        "lake: refused, naming it, while a daemon runs",
    )

    p = _command(
        sub,
        "forget",
        "Erase one client's rows (--ip) or one request (--request-id) from the lake:\n"
        "requests, shield events and rejected lines holding it are rewritten without it,\n"
        "the erasure is recorded in the relation erasures (an address as a keyed hash),\n"
        "and later passes, re-reads and imports do not store it again.",
        "cdnlake.cli.forget_cmd:forget",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--ip", action=Once, metavar="ADDR", help="a client address (IPv4 or IPv6)")
    what.add_argument("--request-id", action=Once, metavar="ID", help="one request's id")
    p.add_argument(
        "--zone",
        type=zone_id,
        action="append",
        metavar="ID",
        help="only this zone (repeat for more; default: every zone)",
    )
    p.add_argument(
        "--from", dest="from_day", action=Once, metavar="YYYY-MM-DD", help="first UTC day"
    )
    p.add_argument("--to", dest="to_day", action=Once, metavar="YYYY-MM-DD", help="last UTC day")
    p.add_argument(
        "--vacuum-now",
        action="store_true",
        help="delete the removed files from storage now (default: at the first vacuum "
        "past retention.vacuum_hours); only while no other process writes the lake: "
        "refused, naming it, while a daemon runs",
    )
    p.add_argument(
        "--replaces-lost",
        action="store_true",
        help="this forget is run again in place of erasures the relation erasures lost "
        "(the zones' rows are refused until then, in a line naming them)",
    )

    p = _command(
        sub,
        "audit",
        "The lake's hourly counts against the provider's own statistics: one row per zone\n"
        "and hour (provider, lake, difference, ratio, verdict ok|short|missing|pending;\n"
        "4xx, 5xx and bytes alike). Exits 1 when an hour is short beyond audit.tolerance\n"
        "or the statistics cannot be read.",
        "cdnlake.cli.audit_cmd:audit",
    )
    from cdnlake.cli.audit_cmd import add_arguments as add_audit_arguments

    add_audit_arguments(p, zone_id, Once)

    p = _command(
        sub,
        "top",
        "What is happening now: requests/s, bytes/s, hit, 4xx and 5xx ratios with\n"
        "sparklines, and the first paths, hosts, countries, status codes, cache statuses,\n"
        "user agents and clients of the last minute, 5 minutes or hour, live from the lake.\n"
        "Keys: q quit, w window (1, 5, h), s sort (r, b, m, e), z zone, d table.\n"
        "On a pipe, or with --once, one snapshot as a table or JSON.",
        "cdnlake.cli.top_cmd:top",
    )
    from cdnlake.cli.top_cmd import add_arguments as add_top_arguments

    add_top_arguments(p, zone_id, Once)

    p = _command(
        sub,
        "emulator",
        "Serve the provider's API on loopback: deterministic traffic, auth, rate limit,\n"
        "retention, late records, and fault injection.",
        "cdnlake.cli.emulator_cmd:emulator",
    )
    from cdnlake.cli.emulator_cmd import add_arguments

    add_arguments(p)

    p = _command(
        sub,
        "demo",
        "Start the emulator, ingest its demo zones into data/, write the report, summarise.",
        "cdnlake.cli.demo_cmd:demo",
    )

    p = _command(
        sub,
        "api",
        "The other API areas (shield, compute, pullzone, video, dns, containers, storagezone); "
        "JSON out.",
        "cdnlake.cli.api_cmd:api",
    )
    from cdnlake.cli.api_cmd import add_arguments as add_api_arguments

    add_api_arguments(p)

    p = _command(
        sub,
        "completion",
        "Print the shell completion script for bash or zsh, generated from this parser:\n"
        '  bash: eval "$(cdnlake completion bash)" in ~/.bashrc\n'
        "  zsh:  cdnlake completion zsh > ~/.zfunc/_cdnlake (a folder on $fpath)",
        "cdnlake.cli.completion_cmd:completion",
    )
    p.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")
    p.set_defaults(parser=parser)  # what the script completes
    return parser


def _slice_options(p: argparse.ArgumentParser, prefix: str) -> None:
    """``--host``, ``--path-prefix``, ``--country``, ``--status-class``, ``--cache-status``
    of ``report`` and ``sql --query``: a slice of the traffic, combinable."""
    p.add_argument("--host", action=Once, metavar="HOST", help=f"{prefix}only this host")
    p.add_argument(
        "--path-prefix",
        action=Once,
        metavar="PATH",
        help=f"{prefix}only the paths that start with PATH (e.g. /img/)",
    )
    p.add_argument(
        "--country",
        action=Once,
        metavar="CC",
        help=f'{prefix}only this country code ("-": unknown)',
    )
    p.add_argument(
        "--status-class", action=Once, metavar="NXX", help=f"{prefix}only 1xx, 2xx, 3xx, 4xx or 5xx"
    )
    p.add_argument(
        "--cache-status", action=Once, metavar="STATUS", help=f"{prefix}only HIT, MISS, ..."
    )


def _engine_option(p: argparse.ArgumentParser) -> None:
    """``--engine`` of ``sql`` and ``report``."""
    p.add_argument(
        "--engine",
        choices=["duckdb", "spark"],
        default="duckdb",
        help="where the query runs: DuckDB here (default) or Spark Connect at engine.spark_remote",
    )


def _resolve(target: str) -> Callable[[argparse.Namespace], int]:
    import importlib

    module, _, name = target.partition(":")
    func: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
    return func


def _no_aws_credentials(exc: CdnlakeError) -> str | None:
    """One line for an S3 lake's error chain that ended in the search for AWS credentials
    (when :func:`cdnlake.cli.common.load` could not tell beforehand: a lake on AWS, where
    an instance role might have answered)."""
    from cdnlake.cli.s3_credentials import METADATA, missing_credentials

    if not METADATA.search(str(exc)):
        return None
    from cdnlake.lake.log.schema import TABLES

    return missing_credentials(str(exc), tuple(spec.name for spec in TABLES))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        return _resolve(args.func)(args)
    except (ConfigError, UsageError, RequestValidationError) as exc:
        print(f"cdnlake: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CdnlakeError as exc:
        credentials = _no_aws_credentials(exc)
        if credentials is not None:  # a configuration matter: exit 2
            print(f"cdnlake: error: {credentials}", file=sys.stderr)
            return EXIT_USAGE
        print(f"cdnlake: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        print(
            f"cdnlake: error: {extra} support is not installed (no module {exc.name!r}): "
            f"pip install 'cdnlake[{extra}]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("cdnlake: interrupted", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK
