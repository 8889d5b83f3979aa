-- answers: Requests by user agent string, most frequent first (the report groups them into browsers, systems and crawlers).
-- param: day DATE = NULL          UTC day, YYYY-MM-DD (or from_day and to_day)
-- param: from_day DATE = NULL     first UTC day of a range (instead of day)
-- param: to_day DATE = NULL       last UTC day of a range (included)
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 1000      distinct user agents (the rest is counted as one row, "(others)")
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH counted AS (
    SELECT coalesce(user_agent, '-') AS user_agent, count(*) AS requests
    FROM requests
    WHERE date BETWEEN coalesce($from_day, $day) AND coalesce($to_day, $day)
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
    GROUP BY coalesce(user_agent, '-')
),
numbered AS (
    SELECT user_agent, requests,
           row_number() OVER (ORDER BY requests DESC, user_agent) AS place
    FROM counted
)
SELECT CASE WHEN place <= $top_n THEN user_agent ELSE '(others)' END   AS user_agent,
       sum(requests)                                                  AS requests
FROM numbered
GROUP BY CASE WHEN place <= $top_n THEN user_agent ELSE '(others)' END
ORDER BY requests DESC, user_agent;
