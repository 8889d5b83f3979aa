-- requests_hourly on Spark: the same relation, aggregated from requests (no rollups).
CREATE OR REPLACE TEMP VIEW requests_hourly AS
SELECT pull_zone_id,
       date,
       CAST(hour(ts) AS INT)              AS hour,
       cache_status,
       status_code,
       count(*)                           AS requests,
       coalesce(sum(bytes_sent), 0)       AS bytes
FROM requests
GROUP BY pull_zone_id, date, CAST(hour(ts) AS INT), cache_status, status_code
