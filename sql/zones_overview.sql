-- answers: Each pull zone's requests, bytes, hit ratios and error rates for one day.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
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
GROUP BY pull_zone_id
ORDER BY pull_zone_id;
