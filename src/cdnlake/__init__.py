"""cdnlake: a CDN's request logs as an analytics lake (Parquet partitions + DuckDB)."""

__version__ = "0.1.0"
