-- answers: The headline figures of a day beside the day before, with the change.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
WITH per_day AS (
    SELECT date,
           count(*)::DOUBLE                                                        AS requests,
           coalesce(sum(bytes_sent), 0)::DOUBLE                                    AS bytes,
           100.0 * count(*) FILTER (WHERE list_contains($hit_statuses, cache_status))
               / count(*)                                                          AS request_hit_ratio_pct,
           100.0 * coalesce(sum(bytes_sent) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
               / nullif(sum(bytes_sent), 0)                                        AS byte_hit_ratio_pct,
           100.0 * count(*) FILTER (WHERE status_code BETWEEN 400 AND 499) / count(*) AS rate_4xx_pct,
           100.0 * count(*) FILTER (WHERE status_code BETWEEN 500 AND 599) / count(*) AS rate_5xx_pct
    FROM requests
    WHERE date IN ($day, $day - INTERVAL 1 DAY)
      AND ($zone IS NULL OR pull_zone_id = $zone)
    GROUP BY date
),
metrics AS (
    UNPIVOT per_day
    ON requests, bytes, request_hit_ratio_pct, byte_hit_ratio_pct, rate_4xx_pct, rate_5xx_pct
    INTO NAME metric VALUE value
),
names(metric, ord) AS (
    VALUES ('requests', 1), ('bytes', 2), ('request_hit_ratio_pct', 3),
           ('byte_hit_ratio_pct', 4), ('rate_4xx_pct', 5), ('rate_5xx_pct', 6)
)
SELECT n.metric,
       round(max(m.value) FILTER (WHERE m.date = $day), 2)                      AS today,
       round(max(m.value) FILTER (WHERE m.date = $day - INTERVAL 1 DAY), 2)     AS previous_day,
       round(100.0 * (today - previous_day) / nullif(previous_day, 0), 2)       AS change_pct
FROM names n
LEFT JOIN metrics m USING (metric)
GROUP BY n.metric, n.ord
ORDER BY n.ord;
