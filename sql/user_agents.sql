-- answers: Requests by user agent string, most frequent first (the report groups them into browsers, systems and crawlers).
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 1000      distinct user agents (the rest is counted as one row, "(others)")
WITH counted AS (
    SELECT coalesce(user_agent, '-') AS user_agent, count(*) AS requests
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
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
