-- answers: Headline traffic of one UTC day: requests, bytes, distinct paths and clients.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
SELECT count(*)                          AS requests,
       coalesce(sum(bytes_sent), 0)      AS bytes,
       count(DISTINCT (host, path))      AS distinct_paths,
       count(DISTINCT remote_ip)         AS distinct_clients
FROM requests
WHERE date = $day
  AND ($zone IS NULL OR pull_zone_id = $zone);
