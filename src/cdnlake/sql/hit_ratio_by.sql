-- answers: Request and byte hit ratios per hour, edge location, country or host.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: dimension VARCHAR = hour {hour|edge|country|host}  what to group by
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
WITH keyed AS (
    SELECT CASE $dimension
               WHEN 'edge'    THEN coalesce(edge_location, '-')
               WHEN 'country' THEN coalesce(country_code, '-')
               WHEN 'host'    THEN coalesce(host, '-')
               ELSE lpad(CAST(hour(ts) AS VARCHAR), 2, '0') || ':00'
           END AS bucket,
           list_contains($hit_statuses, cache_status) AS is_hit,
           bytes_sent
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
)
SELECT bucket,
       count(*)                                                              AS requests,
       round(100.0 * count(*) FILTER (WHERE is_hit) / count(*), 2)           AS request_hit_ratio_pct,
       coalesce(sum(bytes_sent), 0)                                          AS bytes,
       round(100.0 * coalesce(sum(bytes_sent) FILTER (WHERE is_hit), 0)
             / nullif(sum(bytes_sent), 0), 2)                                AS byte_hit_ratio_pct
FROM keyed
GROUP BY bucket
ORDER BY CASE WHEN $dimension = 'hour' THEN bucket END, requests DESC, bucket;
