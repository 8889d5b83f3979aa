-- answers: Response size percentiles (bytes sent): p50, p95, p99 and the largest.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
SELECT count(*)                                        AS requests,
       quantile_disc(bytes_sent, 0.50)                 AS p50_bytes,
       quantile_disc(bytes_sent, 0.95)                 AS p95_bytes,
       quantile_disc(bytes_sent, 0.99)                 AS p99_bytes,
       max(bytes_sent)                                 AS max_bytes
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone);
