-- When each zone's newest forwarded rows were committed: the greatest modification time
-- (ms) of a file whose rows all came by log forwarding (its ``source`` statistics, both
-- 'forwarded'), among the files (``file_stats``) of the zones $zones on the days $days.
SELECT zone, max(modification_time) AS forwarded_ms
FROM file_stats
WHERE list_contains($zones, zone)
  AND list_contains($days, day)
  AND min_source = 'forwarded'
  AND max_source = 'forwarded'
GROUP BY zone;
