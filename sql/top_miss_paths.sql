-- answers: The paths that miss the cache most, ranked by MISS requests or by MISS bytes.
-- param: day DATE = NULL          UTC day, YYYY-MM-DD (or from_day and to_day)
-- param: from_day DATE = NULL     first UTC day of a range (instead of day)
-- param: to_day DATE = NULL       last UTC day of a range (included)
-- param: rank_by VARCHAR = requests {requests|bytes}  rank by MISS requests or MISS bytes
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH misses AS (
    SELECT host,
           path,
           count(*)                      AS miss_requests,
           coalesce(sum(bytes_sent), 0)  AS miss_bytes
    FROM requests
    WHERE date BETWEEN coalesce($from_day, $day) AND coalesce($to_day, $day)
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
      AND cache_status = 'MISS'
    GROUP BY host, path
),
numbered AS (
    SELECT *,
           row_number() OVER (
               ORDER BY CASE $rank_by WHEN 'bytes' THEN miss_bytes ELSE miss_requests END DESC,
                        host, path
           ) AS place
    FROM misses
)
SELECT host, path, miss_requests, miss_bytes
FROM numbered
WHERE place <= $top_n
ORDER BY place;
