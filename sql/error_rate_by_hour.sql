-- answers: 4xx and 5xx error rates per UTC hour.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- From requests_hourly: the rollups where fresh, the rows elsewhere (the same figures).
WITH hourly AS (
    SELECT hour,
           CAST(sum(requests) AS BIGINT)                                           AS requests,
           CAST(coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 400 AND 499), 0)
                AS BIGINT)                                                         AS errors_4xx,
           CAST(coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 500 AND 599), 0)
                AS BIGINT)                                                         AS errors_5xx
    FROM requests_hourly
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
    GROUP BY hour
)
SELECT hour,
       requests,
       errors_4xx,
       errors_5xx,
       round(100.0 * errors_4xx / requests, 2)                                     AS rate_4xx_pct,
       round(100.0 * errors_5xx / requests, 2)                                     AS rate_5xx_pct
FROM hourly
ORDER BY hour;
