-- `cdnlake top`: the newest row of ``top_rows`` (there: the file whose ``ts`` statistics
-- end last) at or after $since (its statistics' newest time, so the Parquet reader skips
-- the row groups before it): its time, zone and source.
SELECT ts, pull_zone_id, source
FROM top_rows
WHERE ts >= $since
ORDER BY ts DESC
LIMIT 1;
