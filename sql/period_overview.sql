-- answers: The headline figures of a range of UTC days: requests, bandwidth, hit ratios, error rates.
-- param: from_day DATE             first UTC day, YYYY-MM-DD
-- param: to_day DATE               last UTC day (included)
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- From requests_hourly: the rollups where fresh, the rows elsewhere (the same figures).
SELECT CAST(coalesce(sum(requests), 0) AS BIGINT)                                    AS requests,
       CAST(coalesce(sum(bytes), 0) AS BIGINT)                                       AS bytes,
       round(100.0 * coalesce(sum(requests) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
             / nullif(sum(requests), 0), 2)                                          AS request_hit_ratio_pct,
       round(100.0 * coalesce(sum(bytes) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
             / nullif(sum(bytes), 0), 2)                                             AS byte_hit_ratio_pct,
       round(100.0 * coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 400 AND 499), 0)
             / nullif(sum(requests), 0), 2)                                          AS rate_4xx_pct,
       round(100.0 * coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 500 AND 599), 0)
             / nullif(sum(requests), 0), 2)                                          AS rate_5xx_pct
FROM requests_hourly
WHERE date BETWEEN $from_day AND $to_day
  AND ($zone IS NULL OR pull_zone_id = $zone);
