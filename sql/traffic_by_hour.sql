-- answers: Requests and bandwidth per UTC hour, split by cache status (for stacked charts).
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- From requests_hourly: the rollups where fresh, the rows elsewhere (the same figures).
SELECT hour,
       cache_status,
       CAST(sum(requests) AS BIGINT)                                  AS requests,
       CAST(coalesce(sum(bytes), 0) AS BIGINT)                        AS bytes
FROM requests_hourly
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY hour, cache_status
ORDER BY hour, cache_status;
