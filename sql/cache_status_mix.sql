-- answers: How requests and bytes split by cache status, and which statuses count as hits.
-- param: day DATE = NULL          UTC day, YYYY-MM-DD (or from_day and to_day)
-- param: from_day DATE = NULL     first UTC day of a range (instead of day)
-- param: to_day DATE = NULL       last UTC day of a range (included)
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
SELECT cache_status,
       count(*)                                                               AS requests,
       coalesce(sum(bytes_sent), 0)                                           AS bytes,
       round(100.0 * count(*) / sum(count(*)) OVER (), 2)                     AS request_pct,
       round(100.0 * sum(bytes_sent) / nullif(sum(sum(bytes_sent)) OVER (), 0), 2) AS byte_pct,
       list_contains($hit_statuses, cache_status)                             AS counted_as_hit
FROM requests
WHERE date BETWEEN coalesce($from_day, $day) AND coalesce($to_day, $day)
  AND ($zone IS NULL OR pull_zone_id = $zone)
  AND ($host IS NULL OR lower(host) = lower($host))
  AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
  AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
  AND ($status_class IS NULL
       OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
  AND ($cache_status IS NULL OR cache_status = upper($cache_status))
GROUP BY cache_status
ORDER BY requests DESC, cache_status;
