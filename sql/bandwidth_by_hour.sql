-- answers: Bandwidth per UTC hour: bytes, average megabits per second, and bytes from cache.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
-- From requests_hourly: the rollups where fresh, the rows elsewhere (the same figures).
WITH sliced AS (
    -- requests_hourly holds no host, path or country: sliced by one of them, the rows.
    SELECT date, hour, cache_status, status_code, requests, bytes
    FROM requests_hourly
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND $host IS NULL AND $path_prefix IS NULL AND $country IS NULL
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
    UNION ALL
    SELECT date, CAST(hour(ts) AS INTEGER) AS hour, cache_status, status_code,
           1 AS requests, bytes_sent AS bytes
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND NOT ($host IS NULL AND $path_prefix IS NULL AND $country IS NULL)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
)
SELECT hour,
       CAST(sum(requests) AS BIGINT)                                             AS requests,
       CAST(coalesce(sum(bytes), 0) AS BIGINT)                                   AS bytes,
       round(CAST(coalesce(sum(bytes), 0) AS BIGINT) * 8 / 3600 / 1e6, 3)        AS avg_mbps,
       CAST(coalesce(sum(bytes) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
            AS BIGINT)                                                           AS hit_bytes
FROM sliced
GROUP BY hour
ORDER BY hour;
