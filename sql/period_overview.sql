-- answers: The headline figures of a range of UTC days: requests, bandwidth, hit ratios, error rates.
-- param: from_day DATE             first UTC day, YYYY-MM-DD
-- param: to_day DATE               last UTC day (included)
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
    WHERE date BETWEEN $from_day AND $to_day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND $host IS NULL AND $path_prefix IS NULL AND $country IS NULL
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
    UNION ALL
    SELECT date, CAST(hour(ts) AS INTEGER) AS hour, cache_status, status_code,
           1 AS requests, bytes_sent AS bytes
    FROM requests
    WHERE date BETWEEN $from_day AND $to_day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND NOT ($host IS NULL AND $path_prefix IS NULL AND $country IS NULL)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
)
SELECT CAST(coalesce(sum(requests), 0) AS BIGINT)                                    AS requests,
       CAST(coalesce(sum(bytes), 0) AS BIGINT)                                       AS bytes,
       round(100.0 * coalesce(sum(requests) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
             / nullif(sum(requests), 0), 2)                                          AS request_hit_ratio_pct,
       round(100.0 * coalesce(sum(bytes) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
             / nullif(sum(bytes), 0), 2)                                             AS byte_hit_ratio_pct,
       round(100.0 * coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 400 AND 499), 0)
             / nullif(sum(requests), 0), 2)                                          AS rate_4xx_pct,
       round(100.0 * coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 500 AND 599), 0)
             / nullif(sum(requests), 0), 2)                                          AS rate_5xx_pct
FROM sliced;
