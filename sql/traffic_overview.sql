-- answers: Headline traffic of one UTC day: requests, bytes, distinct paths and clients.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
WITH day AS (
    SELECT host, path, remote_ip, bytes_sent
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
)
SELECT (SELECT count(*) FROM day)                                          AS requests,
       (SELECT coalesce(sum(bytes_sent), 0) FROM day)                      AS bytes,
       (SELECT count(*) FROM (SELECT DISTINCT host, path FROM day) AS p)   AS distinct_paths,
       (SELECT count(DISTINCT remote_ip) FROM day)                         AS distinct_clients;
