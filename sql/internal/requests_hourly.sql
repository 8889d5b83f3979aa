-- requests_hourly as queries see it: the rollup rows whose partition still has the files
-- they were computed from (_fresh: pull_zone_id, date, files_hash), and every other
-- partition aggregated from its rows (_requests_stale).
CREATE VIEW requests_hourly AS
SELECT r.pull_zone_id, r.date, r.hour, r.cache_status, r.status_code, r.requests, r.bytes
FROM cdnlake_internal._rollup AS r
SEMI JOIN cdnlake_internal._fresh AS f
  ON f.pull_zone_id = r.pull_zone_id AND f.date = r.date AND f.files_hash = r.files_hash
UNION ALL
SELECT pull_zone_id,
       date,
       CAST(hour(ts) AS INTEGER)          AS hour,
       cache_status,
       status_code,
       count(*)                           AS requests,
       coalesce(sum(bytes_sent), 0)       AS bytes
FROM cdnlake_internal._requests_stale
GROUP BY pull_zone_id, date, CAST(hour(ts) AS INTEGER), cache_status, status_code
