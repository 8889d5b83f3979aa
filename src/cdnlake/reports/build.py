"""The daily report: one set of named queries, rendered to html, csv, json and md.

Every figure in every format comes from the same run of the same queries in ``sql/``, so
the formats cannot disagree with each other or with ``cdnlake sql --query``.
"""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from cdnlake.config import Config
from cdnlake.errors import UsageError
from cdnlake.lake.zone.session import LakeSession
from cdnlake.reports.data import ReportData, Table
from cdnlake.reports.derived import derive
from cdnlake.reports.partial import as_date, partial_days, watermarks
from cdnlake.sqlfiles import internal_sql
from cdnlake.warehouse.engine import Session, open_session
from cdnlake.warehouse.named import NamedQuery, Slice, get_named, parse_text
from cdnlake.warehouse.relations import relations_named

AGENTS_READ = 1000  # distinct user agents read for grouping; the rest count as "(others)"
# The user-agent families (grouped from the user_agents query): section -> title.
AGENT_SECTIONS = {
    "browser": "Browsers",
    "os": "Operating systems",
    "tool": "Tools and HTTP libraries",
    "crawler": "Search bots, crawlers and monitors",
    "ai_crawler": "AI crawlers and assistants",
}
# A range report's sections (from_day, to_day instead of day): the whole period, day by
# day, and the daily report's panels that add up over days.
RANGE_SECTIONS: list[tuple[str, str, dict[str, Any], str]] = [
    ("period_overview", "period_overview", {}, "The whole period"),
    ("daily_trend", "daily_trend", {}, "Day by day"),
    ("cache_status_mix", "cache_status_mix", {}, "Cache status mix"),
    ("status_codes", "status_codes", {}, "Status codes"),
    (
        "top_miss_paths_by_bytes",
        "top_miss_paths",
        {"rank_by": "bytes"},
        "Paths that miss the cache most, by miss bytes (share: of all miss bytes)",
    ),
    ("countries", "top_countries", {}, "Countries"),
    ("user_agents", "user_agents", {"top_n": str(AGENTS_READ)}, "User agents"),
]

# (section, named query, fixed parameters, title)
SECTIONS: list[tuple[str, str, dict[str, Any], str]] = [
    ("overview", "traffic_overview", {}, "Traffic"),
    ("hit_ratio", "hit_ratio", {}, "Hit ratio"),
    ("day_over_day", "day_over_day", {}, "Day over day"),
    ("zones", "zones_overview", {}, "Zones"),
    ("cache_status_mix", "cache_status_mix", {}, "Cache status mix"),
    ("traffic_by_hour", "traffic_by_hour", {}, "Traffic by hour and cache status"),
    ("bandwidth_by_hour", "bandwidth_by_hour", {}, "Bandwidth by hour"),
    ("hit_ratio_by_hour", "hit_ratio_by", {"dimension": "hour"}, "Hit ratio by hour"),
    ("hit_ratio_by_edge", "hit_ratio_by", {"dimension": "edge"}, "Hit ratio by edge location"),
    ("hit_ratio_by_country", "hit_ratio_by", {"dimension": "country"}, "Hit ratio by country"),
    ("hit_ratio_by_host", "hit_ratio_by", {"dimension": "host"}, "Hit ratio by host"),
    ("status_codes", "status_codes", {}, "Status codes"),
    ("errors_by_hour", "error_rate_by_hour", {}, "Error rate by hour"),
    ("top_paths_by_requests", "top_paths", {"rank_by": "requests"}, "Top paths by requests"),
    ("top_paths_by_bytes", "top_paths", {"rank_by": "bytes"}, "Top paths by bytes"),
    ("top_paths_by_misses", "top_paths", {"rank_by": "misses"}, "Top paths by cache misses"),
    (
        "top_miss_paths_by_bytes",
        "top_miss_paths",
        {"rank_by": "bytes"},
        "Paths that miss the cache most, by miss bytes (share: of all miss bytes)",
    ),
    ("top_referers", "top_referers", {}, "Top referring hosts"),
    ("countries", "top_countries", {}, "Countries"),
    ("asns", "top_asns", {}, "Networks (ASN)"),
    ("user_agents", "user_agents", {"top_n": str(AGENTS_READ)}, "User agents"),
    ("top_4xx_paths", "top_error_paths", {"status_class": "4xx"}, "Top 4xx paths"),
    ("top_5xx_paths", "top_error_paths", {"status_class": "5xx"}, "Top 5xx paths"),
    ("response_sizes", "response_size_percentiles", {}, "Response size percentiles"),
]
FORMATS = ("html", "csv", "json", "md")
# hit_ratio_by's "bucket" column, by what it groups by.
BUCKETS = {"hour": "Hour (UTC)", "edge": "Edge location", "country": "Country", "host": "Host"}
COUNTS = {"requests", "bytes"}  # day over day's figures that are counts
# The period compared with reads this many times more top rows, so that the rows of this
# period are found in it (a path 11th there is still paired with its figures).
COMPARED_TOP_N = 20


def collect(
    config: Config,
    day: date,
    zone: int | None = None,
    *,
    session: LakeSession,
    engine: str = "duckdb",
    end: date | None = None,
    piece: Slice | None = None,
    compare: str | None = None,
) -> ReportData:
    """Every section of the daily report of ``day`` (or of the range ``day``..``end``), of
    the slice ``piece`` of the traffic; with ``compare`` (previous, week), each table with
    its changes against the period compared with (:mod:`cdnlake.reports.compare`)."""
    piece = piece or Slice()
    data = _data(config, day, end, zone, piece)
    sections = [
        (name, get_named(query_name), fixed, title)
        for name, query_name, fixed, title in (RANGE_SECTIONS if end else SECTIONS)
        if not (name == "zones" and zone is not None)
        # sliced by a status class, the other class's error paths are none by definition
        and not (
            piece.status_class
            and fixed.get("status_class", piece.status_class) != piece.status_class
        )
    ]
    coverage = parse_text("report_coverage", internal_sql("report_coverage"))
    relations: set[str] | None = set()
    for query in [coverage, *(query for _, query, _, _ in sections)]:
        found = relations_named(query.sql)
        relations = None if found is None or relations is None else relations | found
    # Every section asks about these days only (the day before: day over day).
    days = (day if end else day - timedelta(days=1), end or day)
    before: tuple[date, date | None] | None = None
    if compare is not None:
        from cdnlake.reports.compare import compared_period

        before = compared_period(day, end, compare)
        days = (min(days[0], before[0]), days[1])
    with open_session(config, engine, relations, days=days) as engine_session:
        _run(engine_session, sections, data, _common(config, data, config.report.top_n))
        if before is not None:
            data.compare = compare
            data.previous = _data(config, before[0], before[1], zone, piece)
            top_n = config.report.top_n * COMPARED_TOP_N
            _run(engine_session, sections, data.previous, _common(config, data.previous, top_n))
        runs = engine_session.run_named(coverage, {"zone": zone}).rows
    zones = [zone] if zone is not None else [z.id for z in config.zones]
    data.partial = partial_days(
        runs,
        days,
        data.generated_at,
        watermarks(session, zones),
        kept_from=config.retention.first_kept(data.generated_at),
    )
    _finish(data, config.report.top_n)
    if end is not None and "daily_trend" in data.sections:
        trend = data.sections["daily_trend"]
        at = trend.columns.index("date")
        trend.columns.append("partial")
        trend.rows = [(*r, as_date(r[at]) in data.partial) for r in trend.rows]
    if end is None:  # beside the day's figures: how complete they are
        from cdnlake.reports.completeness import completeness

        items = list(data.sections.items())
        at = next((i + 1 for i, (n, _) in enumerate(items) if n == "overview"), 0)
        items.insert(at, ("completeness", completeness(config, session, day, zones)))
        data.sections = dict(items)
        from cdnlake.reports.clients import clients  # how addresses were stored ([privacy])

        data.sections["clients"] = clients(session, zones, data.sections["overview"].first())
    if data.previous is not None:
        from cdnlake.reports.compare import compare as add_changes

        _finish(data.previous, config.report.top_n * COMPARED_TOP_N)
        add_changes(data)
    return data


def _data(
    config: Config, day: date, end: date | None, zone: int | None, piece: Slice
) -> ReportData:
    return ReportData(
        day=day,
        zone=zone,
        hit_statuses=sorted(config.report.hit_statuses),
        generated_at=datetime.now(UTC).replace(microsecond=0),
        end=end,
        zone_names={z.id: z.name for z in config.zones if z.name},
        slice=piece,
    )


def _common(config: Config, data: ReportData, top_n: int) -> dict[str, str | None]:
    """The parameters every section of ``data`` is given (those a query takes): its day
    (or its range), zone, slice and hit statuses."""
    days = (
        {"from_day": data.day.isoformat(), "to_day": (data.end or data.day).isoformat()}
        if data.end
        else {"day": data.day.isoformat()}
    )
    return {
        **days,
        "zone": "NULL" if data.zone is None else str(data.zone),
        "hit_statuses": ",".join(config.report.hit_statuses),
        "top_n": str(top_n),
        **data.slice.params(),
    }


def _run(
    session: Session,
    sections: list[tuple[str, NamedQuery, dict[str, Any], str]],
    data: ReportData,
    common: dict[str, str | None],
) -> None:
    for name, query, fixed, title in sections:
        wanted = {p.name for p in query.params}
        given = {k: v for k, v in {**common, **fixed}.items() if k in wanted}
        result = session.run_named(query, query.bind(given))
        data.sections[name] = Table(title, list(result.columns), list(result.rows))
        if query.name == "hit_ratio_by":
            data.sections[name].labels["bucket"] = BUCKETS[fixed["dimension"]]


def _finish(data: ReportData, top_n: int) -> None:
    """What the report adds to its queries' rows: whole counts, derived columns, the day
    over day's labels, the user agents grouped into families."""
    _whole_counts(data)
    derive(data)
    if "day_over_day" in data.sections:
        labels = data.sections["day_over_day"].labels
        if data.day in data.partial:
            labels["today"] = "This day (partial)"
        if data.day - timedelta(days=1) in data.partial:
            labels["previous_day"] = "Day before (partial)"
    agents = data.sections.pop("user_agents", None)
    if agents is not None:
        from cdnlake.reports.agents import group

        grouped = group([(ua, int(n)) for ua, n in agents.rows], top_n)
        names = list(data.sections)
        at = names.index("asns") + 1 if "asns" in names else len(names)
        items = list(data.sections.items())
        for kind, title in reversed(AGENT_SECTIONS.items()):
            items.insert(at, (kind, Table(title, [kind, "requests", "pct"], grouped[kind])))
        data.sections = dict(items)


def _whole_counts(data: ReportData) -> None:
    """Day over day's counts are whole numbers (the query computes in doubles)."""
    table = data.sections.get("day_over_day")
    if table is None:
        return
    table.rows = [
        (row[0], *(None if v is None else int(v) for v in row[1:3]), *row[3:])
        if row[0] in COUNTS
        else row
        for row in table.rows
    ]


def _write_atomic(path: Path, content: str) -> None:
    """Readers see the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def render(data: ReportData, fmt: str) -> dict[str, str]:
    """File name suffix -> content, for one format."""
    if fmt == "json":
        from cdnlake.reports.formats import to_json

        return {".json": to_json(data)}
    if fmt == "md":
        from cdnlake.reports.formats import to_markdown

        return {".md": to_markdown(data)}
    if fmt == "csv":
        from cdnlake.reports.formats import to_csv

        return {f".{name}.csv": text for name, text in to_csv(data).items()}
    if fmt == "html":
        from cdnlake.reports.html import to_html

        return {".html": to_html(data)}
    raise UsageError(f"report: unknown format {fmt!r} (use {', '.join(FORMATS)})")


def prepare_out_dir(out: Path) -> None:
    """The report folder, made if missing; one line naming it when it cannot be used."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"report --out: {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"report --out: cannot create {out}: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"report --out: {out} is not writable")


def check_formats(formats: tuple[str, ...]) -> tuple[str, ...]:
    """The formats asked for, each once (html,html writes one file: named once)."""
    formats = tuple(dict.fromkeys(formats))
    if not formats:
        raise UsageError(f"report --format: name at least one of {', '.join(FORMATS)}")
    for fmt in formats:
        if fmt not in FORMATS:
            raise UsageError(f"report: unknown format {fmt!r} (use {', '.join(FORMATS)})")
    return formats


def write_reports(
    config: Config,
    day: date,
    *,
    session: LakeSession,
    zone: int | None = None,
    formats: tuple[str, ...] | None = None,
    out: Path | None = None,
    engine: str = "duckdb",
    end: date | None = None,
    piece: Slice | None = None,
    compare: str | None = None,
) -> list[Path]:
    formats = check_formats(config.report.formats if formats is None else formats)
    out = out or config.storage.reports
    prepare_out_dir(out)
    data = collect(
        config,
        day,
        zone,
        session=session,
        engine=engine,
        end=end,
        piece=piece,
        compare=compare,
    )
    written = []
    for fmt in formats:
        for suffix, content in render(data, fmt).items():
            path = out / f"{data.stem}{suffix}"
            _write_atomic(path, content)
            written.append(path)
    return written
