-- The hourly rollup of some partitions of requests (_requests), each row with the
-- fingerprint of the files its partition was computed from (_hashes).
SELECT r.pull_zone_id,
       r.date,
       CAST(hour(r.ts) AS INTEGER)        AS hour,
       r.cache_status,
       r.status_code,
       count(*)                           AS requests,
       coalesce(sum(r.bytes_sent), 0)     AS bytes,
       h.files_hash
FROM _requests AS r
JOIN _hashes AS h ON h.date = r.date
GROUP BY r.pull_zone_id, r.date, CAST(hour(r.ts) AS INTEGER), r.cache_status, r.status_code,
         h.files_hash
