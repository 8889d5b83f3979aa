-- answers: Request hit ratio and byte hit ratio (origin offload) side by side.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH totals AS (
    SELECT count(*)                                                             AS requests,
           count(*) FILTER (WHERE list_contains($hit_statuses, cache_status))   AS hit_requests,
           coalesce(sum(bytes_sent), 0)                                         AS bytes,
           coalesce(sum(bytes_sent) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
                                                                                AS hit_bytes
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
)
SELECT requests,
       hit_requests,
       round(100.0 * hit_requests / nullif(requests, 0), 2)                 AS request_hit_ratio_pct,
       bytes,
       hit_bytes,
       round(100.0 * hit_bytes / nullif(bytes, 0), 2)                       AS byte_hit_ratio_pct,
       array_to_string(list_sort($hit_statuses), ',')                       AS hits_counted
FROM totals;
