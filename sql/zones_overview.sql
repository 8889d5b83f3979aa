-- answers: Each pull zone's requests, bytes, hit ratios and error rates for one day.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
SELECT pull_zone_id,
       count(*)                                                                   AS requests,
       coalesce(sum(bytes_sent), 0)                                               AS bytes,
       round(100.0 * count(*) FILTER (WHERE list_contains($hit_statuses, cache_status)) / count(*), 2)
                                                                                  AS request_hit_ratio_pct,
       round(100.0 * coalesce(sum(bytes_sent) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
             / nullif(sum(bytes_sent), 0), 2)                                     AS byte_hit_ratio_pct,
       round(100.0 * count(*) FILTER (WHERE status_code BETWEEN 400 AND 499) / count(*), 2) AS rate_4xx_pct,
       round(100.0 * count(*) FILTER (WHERE status_code BETWEEN 500 AND 599) / count(*), 2) AS rate_5xx_pct
FROM requests
WHERE date = $day
  AND ($host IS NULL OR lower(host) = lower($host))
  AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
  AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
  AND ($status_class IS NULL
       OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
  AND ($cache_status IS NULL OR cache_status = upper($cache_status))
GROUP BY pull_zone_id
ORDER BY pull_zone_id;
