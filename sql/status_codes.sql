-- answers: Distribution of HTTP status codes.
-- param: day DATE = NULL          UTC day, YYYY-MM-DD (or from_day and to_day)
-- param: from_day DATE = NULL     first UTC day of a range (instead of day)
-- param: to_day DATE = NULL       last UTC day of a range (included)
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
SELECT status_code,
       CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx'   AS class,
       count(*)                                              AS requests,
       round(100.0 * count(*) / sum(count(*)) OVER (), 2)    AS pct
FROM requests
WHERE date BETWEEN coalesce($from_day, $day) AND coalesce($to_day, $day)
  AND ($zone IS NULL OR pull_zone_id = $zone)
  AND ($host IS NULL OR lower(host) = lower($host))
  AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
  AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
  AND ($status_class IS NULL
       OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
  AND ($cache_status IS NULL OR cache_status = upper($cache_status))
GROUP BY status_code
ORDER BY status_code;
