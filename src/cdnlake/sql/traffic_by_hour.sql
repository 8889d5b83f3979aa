-- answers: Requests and bandwidth per UTC hour, split by cache status (for stacked charts).
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
SELECT CAST(hour(ts) AS INTEGER)                                            AS hour,
       cache_status,
       count(*)                                                       AS requests,
       coalesce(sum(bytes_sent), 0)                                   AS bytes
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY CAST(hour(ts) AS INTEGER), cache_status
ORDER BY hour, cache_status;
