-- answers: Distinct clients per UTC day of a range, by the address as stored ([privacy]: whole, its truncated network, or its keyed hash; none when addresses are dropped).
-- param: from_day DATE             first UTC day, YYYY-MM-DD
-- param: to_day DATE               last UTC day (included)
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: counted VARCHAR = exact {exact|approximate}   exact: count(DISTINCT); approximate: HyperLogLog, a few percent off, for days too large to count exactly
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
-- Only the branch $counted names reads the table: the other's filter is false before any scan.
SELECT date,
       count(*)                                                 AS requests,
       count(DISTINCT remote_ip)                                AS distinct_clients,
       'exact'                                                  AS counted
FROM requests
WHERE $counted = 'exact'
  AND date BETWEEN $from_day AND $to_day
  AND ($zone IS NULL OR pull_zone_id = $zone)
  AND ($host IS NULL OR lower(host) = lower($host))
  AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
  AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
  AND ($status_class IS NULL
       OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
  AND ($cache_status IS NULL OR cache_status = upper($cache_status))
GROUP BY date
UNION ALL
SELECT date,
       count(*)                                                 AS requests,
       approx_count_distinct(remote_ip)                         AS distinct_clients,
       'approximate'                                            AS counted
FROM requests
WHERE $counted = 'approximate'
  AND date BETWEEN $from_day AND $to_day
  AND ($zone IS NULL OR pull_zone_id = $zone)
  AND ($host IS NULL OR lower(host) = lower($host))
  AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
  AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
  AND ($status_class IS NULL
       OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
  AND ($cache_status IS NULL OR cache_status = upper($cache_status))
GROUP BY date
ORDER BY date;
