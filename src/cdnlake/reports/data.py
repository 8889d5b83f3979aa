"""What a report holds: its sections as tables of rows, and what it covers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from cdnlake.warehouse.named import Slice


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    labels: dict[str, str] = field(default_factory=dict)  # column -> heading, for this table

    def heading(self, column: str) -> str:
        from cdnlake.reports.text import header

        return self.labels.get(column) or header(column)

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def first(self) -> dict[str, Any]:
        return self.records()[0] if self.rows else {}


@dataclass
class ReportData:
    day: date
    zone: int | None
    hit_statuses: list[str]
    generated_at: datetime
    sections: dict[str, Table] = field(default_factory=dict)
    end: date | None = None  # the last day of a range report; None for a daily report
    zone_names: dict[int, str] = field(default_factory=dict)
    # Days whose figures cover less than the whole day -> why (still running, the lake's
    # first day): said wherever their figures appear.
    partial: dict[date, str] = field(default_factory=dict)
    slice: Slice = field(default_factory=Slice)  # the part of the traffic it covers
    compare: str | None = None  # "previous" or "week": changes against ``previous``
    previous: ReportData | None = None  # the period compared with, as its own report

    @property
    def is_range(self) -> bool:
        return self.end is not None

    @property
    def scope(self) -> str:
        return f"zone-{self.zone}" if self.zone is not None else "all"

    @property
    def period(self) -> str:
        return self.day.isoformat() + (f"--{self.end.isoformat()}" if self.end else "")

    @property
    def stem(self) -> str:
        """The files' name: scope, slice, period and what it is compared with."""
        sliced = f"-{self.slice.slug()}" if self.slice else ""
        versus = f"-vs-{self.compare}" if self.compare else ""
        return f"report-{self.scope}{sliced}-{self.period}{versus}"

    @property
    def compared_with(self) -> str:
        """The period compared with, in words: "2026-11-13" or "2026-11-01 to 2026-11-07"."""
        if self.previous is None:
            return ""
        p = self.previous
        return p.day.isoformat() + (f" to {p.end.isoformat()}" if p.end else "")

    @property
    def noun(self) -> str:
        """What the report covers, in a sentence: "day" or "period"."""
        return "period" if self.is_range else "day"

    def partial_notes(self) -> list[str]:
        """One sentence per partial day the report's figures touch."""
        notes = []
        for day, why in sorted(self.partial.items()):
            if self.previous is not None and day in self.previous.days():
                notes.append(
                    f"{day}, of the period compared with, is a partial day ({why}): the "
                    "changes compare with less than its whole."
                )
            elif day == self.day and not self.is_range:
                notes.append(f"{day} is a partial day ({why}): its figures are not a whole day's.")
            elif not self.is_range and day < self.day:
                notes.append(
                    f"The day before, {day}, is a partial day ({why}): the changes from it "
                    "compare with less than a whole day."
                )
            else:
                notes.append(f"{day} is a partial day ({why}).")
        return notes

    def days(self) -> set[date]:
        """The days the report covers."""
        from datetime import timedelta

        last = self.end or self.day
        return {self.day + timedelta(days=n) for n in range((last - self.day).days + 1)}

    @property
    def empty(self) -> bool:
        if self.is_range:
            return not self.sections["daily_trend"].rows
        return not self.sections["overview"].first().get("requests")

    def zone_label(self, zone_id: int) -> str:
        name = self.zone_names.get(zone_id)
        return f"{zone_id} · {name}" if name else str(zone_id)
