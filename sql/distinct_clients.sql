-- answers: Distinct clients per UTC day of a range, by the address as stored ([privacy]: whole, its truncated network, or its keyed hash; none when addresses are dropped).
-- param: from_day DATE             first UTC day, YYYY-MM-DD
-- param: to_day DATE               last UTC day (included)
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: counted VARCHAR = exact {exact|approximate}   exact: count(DISTINCT); approximate: HyperLogLog, a few percent off, for days too large to count exactly
-- Only the branch $counted names reads the table: the other's filter is false before any scan.
SELECT date,
       count(*)                                                 AS requests,
       count(DISTINCT remote_ip)                                AS distinct_clients,
       'exact'                                                  AS counted
FROM requests
WHERE $counted = 'exact'
  AND date BETWEEN $from_day AND $to_day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY date
UNION ALL
SELECT date,
       count(*)                                                 AS requests,
       approx_count_distinct(remote_ip)                         AS distinct_clients,
       'approximate'                                            AS counted
FROM requests
WHERE $counted = 'approximate'
  AND date BETWEEN $from_day AND $to_day
  AND ($zone IS NULL OR pull_zone_id = $zone)
GROUP BY date
ORDER BY date;
