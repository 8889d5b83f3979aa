-- answers: The most requested paths, ranked by requests, by bytes or by cache misses.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: rank_by VARCHAR = requests {requests|bytes|misses}  what to rank by
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH day AS (
    SELECT host, path, bytes_sent, cache_status
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
),
paths AS (
    SELECT host,
           path,
           count(*)                                            AS requests,
           coalesce(sum(bytes_sent), 0)                        AS bytes,
           count(*) FILTER (WHERE cache_status = 'MISS')       AS misses
    FROM day
    GROUP BY host, path
),
totals AS (
    SELECT count(*) AS requests, coalesce(sum(bytes_sent), 0) AS bytes,
           count(*) FILTER (WHERE cache_status = 'MISS') AS misses
    FROM day
),
numbered AS (
    SELECT p.*,
           round(100.0 * CASE $rank_by WHEN 'bytes' THEN p.bytes WHEN 'misses' THEN p.misses
                                       ELSE p.requests END
                 / nullif(CASE $rank_by WHEN 'bytes' THEN t.bytes WHEN 'misses' THEN t.misses
                                        ELSE t.requests END, 0), 2)        AS share_pct,
           row_number() OVER (
               ORDER BY CASE $rank_by WHEN 'bytes' THEN p.bytes WHEN 'misses' THEN p.misses
                                      ELSE p.requests END DESC,
                        p.host, p.path
           ) AS place
    FROM paths AS p CROSS JOIN totals AS t
    WHERE $rank_by <> 'misses' OR p.misses > 0
)
SELECT host, path, requests, bytes, misses, share_pct
FROM numbered
WHERE place <= $top_n
ORDER BY place;
