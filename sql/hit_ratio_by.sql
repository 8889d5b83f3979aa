-- answers: Request and byte hit ratios per hour, edge location, country or host.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: dimension VARCHAR = hour {hour|edge|country|host}  what to group by
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- By hour it reads requests_hourly (the rollups where fresh, the rows elsewhere).
WITH keyed AS (
    SELECT CASE $dimension
               WHEN 'edge'    THEN coalesce(edge_location, '-')
               WHEN 'country' THEN coalesce(country_code, '-')
               ELSE coalesce(host, '-')
           END AS bucket,
           1 AS requests,
           list_contains($hit_statuses, cache_status) AS is_hit,
           bytes_sent AS bytes
    FROM requests
    WHERE $dimension <> 'hour'
      AND date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
    UNION ALL
    SELECT lpad(CAST(hour AS VARCHAR), 2, '0') || ':00' AS bucket,
           requests,
           list_contains($hit_statuses, cache_status) AS is_hit,
           bytes
    FROM requests_hourly
    WHERE $dimension = 'hour'
      AND date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
)
SELECT bucket,
       CAST(sum(requests) AS BIGINT)                                         AS requests,
       round(100.0 * coalesce(sum(requests) FILTER (WHERE is_hit), 0) / sum(requests), 2)
                                                                             AS request_hit_ratio_pct,
       CAST(coalesce(sum(bytes), 0) AS BIGINT)                               AS bytes,
       round(100.0 * coalesce(sum(bytes) FILTER (WHERE is_hit), 0)
             / nullif(sum(bytes), 0), 2)                                     AS byte_hit_ratio_pct
FROM keyed
GROUP BY bucket
ORDER BY CASE WHEN $dimension = 'hour' THEN bucket END, requests DESC, bucket;
