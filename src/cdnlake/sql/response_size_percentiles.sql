-- answers: Response size percentiles (bytes sent): p50, p95, p99 and the largest.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
WITH q AS (
    SELECT count(*)                                           AS requests,
           quantile_disc(bytes_sent, [0.50, 0.95, 0.99])      AS p,
           max(bytes_sent)                                    AS max_bytes
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
)
SELECT requests, p[1] AS p50_bytes, p[2] AS p95_bytes, p[3] AS p99_bytes, max_bytes
FROM q;
