-- answers: Request hit ratio and byte hit ratio (origin offload) side by side.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
WITH totals AS (
    SELECT count(*)                                                             AS requests,
           count(*) FILTER (WHERE list_contains($hit_statuses, cache_status))   AS hit_requests,
           coalesce(sum(bytes_sent), 0)                                         AS bytes,
           coalesce(sum(bytes_sent) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
                                                                                AS hit_bytes
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
)
SELECT requests,
       hit_requests,
       round(100.0 * hit_requests / nullif(requests, 0), 2)                 AS request_hit_ratio_pct,
       bytes,
       hit_bytes,
       round(100.0 * hit_bytes / nullif(bytes, 0), 2)                       AS byte_hit_ratio_pct,
       array_to_string(list_sort($hit_statuses), ',')                       AS hits_counted
FROM totals;
