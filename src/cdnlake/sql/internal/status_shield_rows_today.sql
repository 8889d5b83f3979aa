SELECT shield_zone_id, count(*) AS rows_today
FROM shield_events
WHERE date = $today
GROUP BY shield_zone_id;
