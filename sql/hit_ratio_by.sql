-- answers: Request and byte hit ratios per hour, edge location, country or host.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: dimension VARCHAR = hour {hour|edge|country|host}  what to group by
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
-- By hour it reads requests_hourly (the rollups where fresh, the rows elsewhere).
WITH sliced AS (
    -- requests_hourly holds no host, path or country: sliced by one of them, the rows.
    SELECT date, hour, cache_status, status_code, requests, bytes
    FROM requests_hourly
    WHERE $dimension = 'hour'
      AND date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND $host IS NULL AND $path_prefix IS NULL AND $country IS NULL
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
    UNION ALL
    SELECT date, CAST(hour(ts) AS INTEGER) AS hour, cache_status, status_code,
           1 AS requests, bytes_sent AS bytes
    FROM requests
    WHERE $dimension = 'hour'
      AND date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND NOT ($host IS NULL AND $path_prefix IS NULL AND $country IS NULL)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
),
keyed AS (
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
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
    UNION ALL
    SELECT lpad(CAST(hour AS VARCHAR), 2, '0') || ':00' AS bucket,
           requests,
           list_contains($hit_statuses, cache_status) AS is_hit,
           bytes
    FROM sliced
    WHERE $dimension = 'hour'
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
