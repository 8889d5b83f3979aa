-- answers: The paths that miss the cache most, ranked by MISS requests or by MISS bytes.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: rank_by VARCHAR = requests {requests|bytes}  rank by MISS requests or MISS bytes
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
WITH misses AS (
    SELECT host,
           path,
           count(*)                      AS miss_requests,
           coalesce(sum(bytes_sent), 0)  AS miss_bytes
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
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
