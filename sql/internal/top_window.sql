-- `cdnlake top`: the window [$start, $end) of ``top_rows``, in one scan:
--   * ``bucket``: the window cut into $buckets equal spans (the sparklines), one row per
--     span that holds a request, its number in ``key``;
--   * ``path``, ``host``, ``country``, ``status``, ``cache``, ``agent``, ``client``
--     (``remote_ip`` as [privacy] stored it): the $limit first keys of each, ranked by
--     $sort (requests, bytes, misses or errors; then requests, then the key). A NULL key:
--     unknown.
-- Each row: requests, bytes, misses (a cache status not in $hit_statuses; hits are the
-- others), errors (status 400 and up), and of those 4xx and 5xx.
WITH window_rows AS (
    SELECT *,
           least(
               $buckets * (epoch_us(ts) - epoch_us($start)) // (epoch_us($end) - epoch_us($start)),
               $buckets - 1
           )::INTEGER AS bucket,
           coalesce(list_contains($hit_statuses, cache_status), false) AS hit
    FROM top_rows
    WHERE ts >= $start AND ts < $end
), grouped AS (
    SELECT CASE
               WHEN grouping(bucket) = 0 THEN 'bucket'
               WHEN grouping(path) = 0 THEN 'path'
               WHEN grouping(host) = 0 THEN 'host'
               WHEN grouping(country_code) = 0 THEN 'country'
               WHEN grouping(status_code) = 0 THEN 'status'
               WHEN grouping(cache_status) = 0 THEN 'cache'
               WHEN grouping(user_agent) = 0 THEN 'agent'
               ELSE 'client'
           END                                                        AS dimension,
           CASE
               WHEN grouping(bucket) = 0 THEN CAST(bucket AS VARCHAR)
               WHEN grouping(path) = 0 THEN path
               WHEN grouping(host) = 0 THEN host
               WHEN grouping(country_code) = 0 THEN country_code
               WHEN grouping(status_code) = 0 THEN CAST(status_code AS VARCHAR)
               WHEN grouping(cache_status) = 0 THEN cache_status
               WHEN grouping(user_agent) = 0 THEN user_agent
               ELSE remote_ip
           END                                                        AS key,
           count(*)                                                   AS requests,
           coalesce(sum(bytes_sent), 0)::BIGINT                       AS bytes,
           count(*) FILTER (WHERE NOT hit)                            AS misses,
           count(*) FILTER (WHERE status_code >= 400)                 AS errors,
           count(*) FILTER (WHERE status_code BETWEEN 400 AND 499)    AS client_errors,
           count(*) FILTER (WHERE status_code >= 500)                 AS server_errors
    FROM window_rows
    GROUP BY GROUPING SETS (
        (bucket), (path), (host), (country_code), (status_code), (cache_status), (user_agent),
        (remote_ip)
    )
), ranked AS (
    SELECT *,
           row_number() OVER (
               PARTITION BY dimension
               ORDER BY CASE $sort
                            WHEN 'bytes' THEN bytes
                            WHEN 'misses' THEN misses
                            WHEN 'errors' THEN errors
                            ELSE requests
                        END DESC,
                        requests DESC,
                        key NULLS LAST
           ) AS rank
    FROM grouped
)
SELECT dimension, key, requests, bytes, misses, errors, client_errors, server_errors
FROM ranked
WHERE dimension = 'bucket' OR rank <= $limit
ORDER BY dimension, rank;
