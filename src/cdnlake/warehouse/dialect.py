"""Named queries are written once, in DuckDB's dialect; Spark gets them through sqlglot.

The files keep to what both engines share once translated (no lateral column aliases,
no UNPIVOT, ``hour(ts)`` rather than epoch arithmetic, LIMITs as ``row_number()``), so
the one translation step is sqlglot's own: ``$name`` becomes ``:name`` (bound by Spark),
``list_contains`` becomes ``array_contains``, NULL ordering is made explicit, and so on.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.generators.spark import SparkGenerator

from cdnlake.errors import UsageError


class SparkExact(Spark):
    """Spark, keeping ``percentile_disc(p) WITHIN GROUP (ORDER BY x)`` as it is: Spark
    computes it exactly, where sqlglot's Spark output turns it into an approximation."""

    class Generator(SparkGenerator):
        TRANSFORMS: ClassVar[dict[Any, Any]] = {
            k: v for k, v in SparkGenerator.TRANSFORMS.items() if k is not exp.WithinGroup
        }


@functools.cache
def to_spark(sql: str) -> str:
    """``sql`` (DuckDB's dialect, ``$name`` parameters) as Spark SQL (``:name``)."""
    try:
        statements = sqlglot.transpile(sql, read="duckdb", write=SparkExact)
    except sqlglot.errors.ParseError as exc:
        raise UsageError(f"sql: cannot translate the query for Spark: {exc}") from None
    statements = [s for s in statements if s.strip()]
    if len(statements) != 1:
        raise UsageError("sql: a named query must be one statement")
    return statements[0]
