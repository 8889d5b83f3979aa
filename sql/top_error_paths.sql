-- answers: The paths with the most 4xx (or 5xx) answers, and their commonest status code.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: status_class VARCHAR = 5xx {4xx|5xx}  which errors (also the slice's status class)
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH errors AS (
    SELECT host, path, status_code
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
      AND status_code BETWEEN CASE $status_class WHEN '4xx' THEN 400 ELSE 500 END
                          AND CASE $status_class WHEN '4xx' THEN 499 ELSE 599 END
),
by_code AS (
    -- the commonest status of each path, ties to the lowest code
    SELECT host, path, status_code, count(*) AS n,
           row_number() OVER (PARTITION BY host, path ORDER BY count(*) DESC, status_code) AS r
    FROM errors
    GROUP BY host, path, status_code
),
ranked AS (
    SELECT host, path, sum(n) AS errors,
           min(CASE WHEN r = 1 THEN status_code END) AS commonest_status
    FROM by_code
    GROUP BY host, path
),
numbered AS (
    SELECT *, row_number() OVER (ORDER BY errors DESC, host, path) AS place
    FROM ranked
)
SELECT host, path, errors, commonest_status
FROM numbered
WHERE place <= $top_n
ORDER BY place;
