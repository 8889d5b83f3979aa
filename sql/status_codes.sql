-- answers: Distribution of HTTP status codes.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
SELECT status_code,
       CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx'   AS class,
       count(*)                                              AS requests,
       round(100.0 * count(*) / sum(count(*)) OVER (), 2)    AS pct
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY status_code
ORDER BY status_code;
