-- answers: Bandwidth per UTC hour: bytes, average megabits per second, and bytes from cache.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- From requests_hourly: the rollups where fresh, the rows elsewhere (the same figures).
SELECT hour,
       CAST(sum(requests) AS BIGINT)                                             AS requests,
       CAST(coalesce(sum(bytes), 0) AS BIGINT)                                   AS bytes,
       round(CAST(coalesce(sum(bytes), 0) AS BIGINT) * 8 / 3600 / 1e6, 3)        AS avg_mbps,
       CAST(coalesce(sum(bytes) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
            AS BIGINT)                                                           AS hit_bytes
FROM requests_hourly
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY hour
ORDER BY hour;
