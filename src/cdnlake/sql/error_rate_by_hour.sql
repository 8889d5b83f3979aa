-- answers: 4xx and 5xx error rates per UTC hour.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
SELECT ((epoch_ms(ts) // 3600000) % 24)::INTEGER                                             AS hour,
       count(*)                                                                 AS requests,
       count(*) FILTER (WHERE status_code BETWEEN 400 AND 499)                  AS errors_4xx,
       count(*) FILTER (WHERE status_code BETWEEN 500 AND 599)                  AS errors_5xx,
       round(100.0 * errors_4xx / count(*), 2)                                  AS rate_4xx_pct,
       round(100.0 * errors_5xx / count(*), 2)                                  AS rate_5xx_pct
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY hour
ORDER BY hour;
