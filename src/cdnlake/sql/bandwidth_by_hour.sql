-- answers: Bandwidth per UTC hour: bytes, average megabits per second, and bytes from cache.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
SELECT CAST(hour(ts) AS INTEGER)                                                       AS hour,
       count(*)                                                                  AS requests,
       coalesce(sum(bytes_sent), 0)                                              AS bytes,
       round(coalesce(sum(bytes_sent), 0) * 8 / 3600 / 1e6, 3)                   AS avg_mbps,
       coalesce(sum(bytes_sent) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
                                                                                 AS hit_bytes
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY CAST(hour(ts) AS INTEGER)
ORDER BY hour;
