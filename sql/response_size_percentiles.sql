-- answers: Response size percentiles (bytes sent): p50, p95, p99 and the largest.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
SELECT count(*)                                                   AS requests,
       CAST(percentile_disc(0.50) WITHIN GROUP (ORDER BY bytes_sent) AS BIGINT) AS p50_bytes,
       CAST(percentile_disc(0.95) WITHIN GROUP (ORDER BY bytes_sent) AS BIGINT) AS p95_bytes,
       CAST(percentile_disc(0.99) WITHIN GROUP (ORDER BY bytes_sent) AS BIGINT) AS p99_bytes,
       max(bytes_sent)                                            AS max_bytes
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone);
