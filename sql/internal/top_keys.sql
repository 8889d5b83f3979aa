-- `cdnlake top`: the $limit first paths, hosts, countries, status codes, cache statuses,
-- user agents and clients (``remote_ip`` as [privacy] stored it) of the window
-- [$start, $end) of ``top_rows``, in one scan. Each with its requests, bytes, misses (a
-- cache status not in $hit_statuses) and errors (status 400 and up), ranked by $sort
-- (requests, bytes, misses or errors; then requests, then the key). A NULL key: unknown.
WITH window_rows AS (
    SELECT * FROM top_rows WHERE ts >= $start AND ts < $end
), grouped AS (
    SELECT CASE
               WHEN grouping(path) = 0 THEN 'path'
               WHEN grouping(host) = 0 THEN 'host'
               WHEN grouping(country_code) = 0 THEN 'country'
               WHEN grouping(status_code) = 0 THEN 'status'
               WHEN grouping(cache_status) = 0 THEN 'cache'
               WHEN grouping(user_agent) = 0 THEN 'agent'
               ELSE 'client'
           END                                                                 AS dimension,
           CASE
               WHEN grouping(path) = 0 THEN path
               WHEN grouping(host) = 0 THEN host
               WHEN grouping(country_code) = 0 THEN country_code
               WHEN grouping(status_code) = 0 THEN CAST(status_code AS VARCHAR)
               WHEN grouping(cache_status) = 0 THEN cache_status
               WHEN grouping(user_agent) = 0 THEN user_agent
               ELSE remote_ip
           END                                                                 AS key,
           count(*)                                                            AS requests,
           coalesce(sum(bytes_sent), 0)::BIGINT                                AS bytes,
           count(*) FILTER (WHERE NOT coalesce(list_contains($hit_statuses, cache_status), false))
                                                                               AS misses,
           count(*) FILTER (WHERE status_code >= 400)                          AS errors
    FROM window_rows
    GROUP BY GROUPING SETS (
        (path), (host), (country_code), (status_code), (cache_status), (user_agent), (remote_ip)
    )
)
SELECT dimension, key, requests, bytes, misses, errors
FROM grouped
QUALIFY row_number() OVER (
    PARTITION BY dimension
    ORDER BY CASE $sort
                 WHEN 'bytes' THEN bytes
                 WHEN 'misses' THEN misses
                 WHEN 'errors' THEN errors
                 ELSE requests
             END DESC,
             requests DESC,
             key NULLS LAST
) <= $limit
ORDER BY dimension, CASE $sort
                        WHEN 'bytes' THEN bytes
                        WHEN 'misses' THEN misses
                        WHEN 'errors' THEN errors
                        ELSE requests
                    END DESC, requests DESC, key NULLS LAST;
