-- answers: 4xx and 5xx error rates per UTC hour.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
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
),
hourly AS (
    SELECT hour,
           CAST(sum(requests) AS BIGINT)                                           AS requests,
           CAST(coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 400 AND 499), 0)
                AS BIGINT)                                                         AS errors_4xx,
           CAST(coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 500 AND 599), 0)
                AS BIGINT)                                                         AS errors_5xx
    FROM sliced
    GROUP BY hour
)
SELECT hour,
       requests,
       errors_4xx,
       errors_5xx,
       round(100.0 * errors_4xx / requests, 2)                                     AS rate_4xx_pct,
       round(100.0 * errors_5xx / requests, 2)                                     AS rate_5xx_pct
FROM hourly
ORDER BY hour;
