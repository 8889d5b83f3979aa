-- answers: The paths that miss the cache most, ranked by MISS requests or by MISS bytes.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: rank_by VARCHAR = requests {requests|bytes}  rank by MISS requests or MISS bytes
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
SELECT host,
       path,
       count(*)                      AS miss_requests,
       coalesce(sum(bytes_sent), 0)  AS miss_bytes
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
  AND cache_status = 'MISS'
GROUP BY host, path
ORDER BY CASE $rank_by
             WHEN 'requests' THEN count(*)
             WHEN 'bytes'    THEN sum(bytes_sent)
             ELSE error('rank_by must be requests or bytes')
         END DESC,
         host, path
LIMIT $top_n;
