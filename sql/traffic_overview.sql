-- answers: Headline traffic of one UTC day: requests, bytes, distinct paths and clients.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH day AS (
    SELECT host, path, remote_ip, bytes_sent
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
)
SELECT (SELECT count(*) FROM day)                                          AS requests,
       (SELECT coalesce(sum(bytes_sent), 0) FROM day)                      AS bytes,
       (SELECT count(*) FROM (SELECT DISTINCT host, path FROM day) AS p)   AS distinct_paths,
       (SELECT count(DISTINCT remote_ip) FROM day)                         AS distinct_clients;
