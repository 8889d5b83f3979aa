-- answers: Requests and bytes by the client's country ("-" where the provider did not know it).
-- param: day DATE = NULL          UTC day, YYYY-MM-DD (or from_day and to_day)
-- param: from_day DATE = NULL     first UTC day of a range (instead of day)
-- param: to_day DATE = NULL       last UTC day of a range (included)
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH counted AS (
    SELECT coalesce(country_code, '-') AS country_code,
           count(*) AS requests,
           coalesce(sum(bytes_sent), 0) AS bytes
    FROM requests
    WHERE date BETWEEN coalesce($from_day, $day) AND coalesce($to_day, $day)
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
    GROUP BY coalesce(country_code, '-')
),
numbered AS (
    SELECT country_code, requests, bytes,
           round(100.0 * requests / sum(requests) OVER (), 2)            AS pct,
           row_number() OVER (ORDER BY requests DESC, country_code)     AS place
    FROM counted
)
SELECT country_code, requests, bytes, pct
FROM numbered
WHERE place <= $top_n
ORDER BY place;
