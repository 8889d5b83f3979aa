"""What a report holds: its sections as tables of rows, and what it covers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any


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
        return f"report-{self.scope}-{self.period}"

    @property
    def noun(self) -> str:
        """What the report covers, in a sentence: "day" or "period"."""
        return "period" if self.is_range else "day"

    def partial_notes(self) -> list[str]:
        """One sentence per partial day the report's figures touch."""
        notes = []
        for day, why in sorted(self.partial.items()):
            if day == self.day and not self.is_range:
                notes.append(f"{day} is a partial day ({why}): its figures are not a whole day's.")
            elif not self.is_range and day < self.day:
                notes.append(
                    f"The day before, {day}, is a partial day ({why}): the changes from it "
                    "compare with less than a whole day."
                )
            else:
                notes.append(f"{day} is a partial day ({why}).")
        return notes

    @property
    def empty(self) -> bool:
        if self.is_range:
            return not self.sections["daily_trend"].rows
        return not self.sections["overview"].first().get("requests")

    def zone_label(self, zone_id: int) -> str:
        name = self.zone_names.get(zone_id)
        return f"{zone_id} · {name}" if name else str(zone_id)
