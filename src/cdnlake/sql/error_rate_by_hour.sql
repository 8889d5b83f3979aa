-- answers: 4xx and 5xx error rates per UTC hour.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
SELECT CAST(hour(ts) AS INTEGER)                                                      AS hour,
       count(*)                                                                 AS requests,
       count(*) FILTER (WHERE status_code BETWEEN 400 AND 499)                  AS errors_4xx,
       count(*) FILTER (WHERE status_code BETWEEN 500 AND 599)                  AS errors_5xx,
       round(100.0 * count(*) FILTER (WHERE status_code BETWEEN 400 AND 499) / count(*), 2)
                                                                                AS rate_4xx_pct,
       round(100.0 * count(*) FILTER (WHERE status_code BETWEEN 500 AND 599) / count(*), 2)
                                                                                AS rate_5xx_pct
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY CAST(hour(ts) AS INTEGER)
ORDER BY hour;
