"""What the report adds to its sections from their own figures, the same in every format:
miss paths' shares of the miss bytes, countries' names, status codes grouped by class."""

from __future__ import annotations

from cdnlake.reports.data import ReportData


def derive(data: ReportData) -> None:
    """Every addition below, in place."""
    miss_byte_shares(data)
    country_names(data)
    status_classes_before_codes(data)


def miss_byte_shares(data: ReportData) -> None:
    """Each miss path's share of all the bytes the day's misses fetched from the origin."""
    table = data.sections.get("top_miss_paths_by_bytes")
    if table is None:
        return
    mix = data.sections["cache_status_mix"].records()
    total = sum(int(r["bytes"] or 0) for r in mix if r["cache_status"] == "MISS")
    at = table.columns.index("miss_bytes")
    table.columns.append("share_pct")
    table.rows = [
        (*r, round(100.0 * int(r[at] or 0) / total, 2) if total else None) for r in table.rows
    ]
    # Named as the table beside it names the same figures (its "Misses"); the share is
    # of the miss bytes, as the title says: a short header keeps a phone's column narrow.
    table.labels.update(miss_requests="Misses", miss_bytes="Miss bytes", share_pct="Share")


def country_names(data: ReportData) -> None:
    """A ``country`` column (its English name) beside each country code."""
    from cdnlake.reports.countries import country_name

    for name, code in (("countries", "country_code"), ("hit_ratio_by_country", "bucket")):
        table = data.sections.get(name)
        if table is None:
            continue
        at = table.columns.index(code) + 1
        table.columns.insert(at, "country")
        table.rows = [(*r[:at], country_name(r[at - 1]), *r[at:]) for r in table.rows]
        table.labels.update({code: "Code", "country": "Country"})


def status_classes_before_codes(data: ReportData) -> None:
    """The status classes (2xx...) just before the status codes they group."""
    codes = data.sections.get("status_codes")
    if codes is None:
        return
    from cdnlake.reports.statuses import status_classes

    items = list(data.sections.items())
    at = list(data.sections).index("status_codes")
    items.insert(at, ("status_classes", status_classes(codes)))
    data.sections = dict(items)
