SELECT pull_zone_id, count(*) AS rows_today
FROM requests
WHERE date = $today
GROUP BY pull_zone_id;
