-- `cdnlake top`: the window [$start, $end) of ``top_rows`` cut into $buckets equal spans
-- (the sparklines): per span its requests, bytes, hits (a cache status of $hit_statuses)
-- and 4xx and 5xx answers. A span without a request has no row.
SELECT least(
           $buckets * (epoch_us(ts) - epoch_us($start)) // (epoch_us($end) - epoch_us($start)),
           $buckets - 1
       )::INTEGER                                                          AS bucket,
       count(*)                                                            AS requests,
       coalesce(sum(bytes_sent), 0)::BIGINT                                AS bytes,
       count(*) FILTER (WHERE list_contains($hit_statuses, cache_status))  AS hits,
       count(*) FILTER (WHERE status_code BETWEEN 400 AND 499)             AS client_errors,
       count(*) FILTER (WHERE status_code >= 500)                          AS server_errors
FROM top_rows
WHERE ts >= $start AND ts < $end
GROUP BY ALL
ORDER BY bucket;
