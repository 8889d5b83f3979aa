-- answers: The paths with the most 4xx (or 5xx) answers, and their commonest status code.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: status_class VARCHAR = 5xx {4xx|5xx}  which errors
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
SELECT host,
       path,
       count(*)               AS errors,
       mode(status_code)      AS commonest_status
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
  AND status_code // 100 = CASE $status_class
                               WHEN '4xx' THEN 4
                               WHEN '5xx' THEN 5
                               ELSE error('status_class must be 4xx or 5xx')
                           END
GROUP BY host, path
ORDER BY errors DESC, host, path
LIMIT $top_n;
