-- answers: How requests and bytes split by cache status, and which statuses count as hits.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
SELECT cache_status,
       count(*)                                                               AS requests,
       coalesce(sum(bytes_sent), 0)                                           AS bytes,
       round(100.0 * count(*) / sum(count(*)) OVER (), 2)                     AS request_pct,
       round(100.0 * sum(bytes_sent) / nullif(sum(sum(bytes_sent)) OVER (), 0), 2) AS byte_pct,
       list_contains($hit_statuses, cache_status)                             AS counted_as_hit
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY cache_status
ORDER BY requests DESC, cache_status;
