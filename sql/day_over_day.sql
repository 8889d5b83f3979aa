-- answers: The headline figures of a day beside the day before: counts change in %, rates in percentage points.
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: hit_statuses VARCHAR[] = HIT,STALE,UPDATING,REVALIDATED   statuses counted as hits
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH per_day AS (
    SELECT date,
           CAST(count(*) AS DOUBLE)                                                AS requests,
           CAST(coalesce(sum(bytes_sent), 0) AS DOUBLE)                            AS bytes,
           100.0 * count(*) FILTER (WHERE list_contains($hit_statuses, cache_status))
               / count(*)                                                          AS request_hit_ratio_pct,
           100.0 * coalesce(sum(bytes_sent) FILTER (WHERE list_contains($hit_statuses, cache_status)), 0)
               / nullif(sum(bytes_sent), 0)                                        AS byte_hit_ratio_pct,
           100.0 * count(*) FILTER (WHERE status_code BETWEEN 400 AND 499) / count(*) AS rate_4xx_pct,
           100.0 * count(*) FILTER (WHERE status_code BETWEEN 500 AND 599) / count(*) AS rate_5xx_pct
    FROM requests
    WHERE date IN ($day, $day - INTERVAL 1 DAY)
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
    GROUP BY date
),
names AS (
    SELECT 'requests' AS metric, 1 AS ord
    UNION ALL SELECT 'bytes', 2
    UNION ALL SELECT 'request_hit_ratio_pct', 3
    UNION ALL SELECT 'byte_hit_ratio_pct', 4
    UNION ALL SELECT 'rate_4xx_pct', 5
    UNION ALL SELECT 'rate_5xx_pct', 6
),
metrics AS (
    SELECT date, 'requests' AS metric, 1 AS ord, requests AS value FROM per_day
    UNION ALL SELECT date, 'bytes' AS metric, 2 AS ord, bytes AS value FROM per_day
    UNION ALL SELECT date, 'request_hit_ratio_pct' AS metric, 3 AS ord, request_hit_ratio_pct AS value FROM per_day
    UNION ALL SELECT date, 'byte_hit_ratio_pct' AS metric, 4 AS ord, byte_hit_ratio_pct AS value FROM per_day
    UNION ALL SELECT date, 'rate_4xx_pct' AS metric, 5 AS ord, rate_4xx_pct AS value FROM per_day
    UNION ALL SELECT date, 'rate_5xx_pct' AS metric, 6 AS ord, rate_5xx_pct AS value FROM per_day
),
paired AS (
    SELECT n.metric,
           n.ord,
           round(max(CASE WHEN m.date = $day THEN m.value END), 2)                      AS today,
           round(max(CASE WHEN m.date = $day - INTERVAL 1 DAY THEN m.value END), 2)     AS previous_day
    FROM names AS n
    LEFT JOIN metrics AS m ON m.metric = n.metric
    GROUP BY n.metric, n.ord
)
SELECT metric,
       today,
       previous_day,
       CASE WHEN metric IN ('requests', 'bytes')
            THEN round(100.0 * (today - previous_day) / nullif(previous_day, 0), 2) END  AS change_pct,
       CASE WHEN metric NOT IN ('requests', 'bytes')
            THEN round(today - previous_day, 2) END                                      AS change_pp
FROM paired
ORDER BY ord;
