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
    def empty(self) -> bool:
        if self.is_range:
            return not self.sections["daily_trend"].rows
        return not self.sections["overview"].first().get("requests")

    def zone_label(self, zone_id: int) -> str:
        name = self.zone_names.get(zone_id)
        return f"{zone_id} · {name}" if name else str(zone_id)
