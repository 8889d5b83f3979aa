-- The lake's counts per pull zone and UTC hour, as the provider's statistics count them:
-- requests, 4xx and 5xx answers, and bytes sent. $first and $last are UTC days (both
-- included); $zones the pull zone ids to count.
SELECT pull_zone_id,
       date,
       hour,
       sum(requests)                                               AS requests,
       coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 400 AND 499), 0) AS errors_4xx,
       coalesce(sum(requests) FILTER (WHERE status_code BETWEEN 500 AND 599), 0) AS errors_5xx,
       coalesce(sum(bytes), 0)                                     AS bytes
FROM requests_hourly
WHERE date BETWEEN $first AND $last
  AND list_contains($zones, pull_zone_id)
GROUP BY pull_zone_id, date, hour
ORDER BY pull_zone_id, date, hour
