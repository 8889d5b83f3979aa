-- Each zone's newest forwarded row: the greatest ``max_ts`` (a request time) of its files
-- whose rows all came by log forwarding (their ``source`` statistics, both 'forwarded'),
-- among the files (``file_stats``) of the zones $zones on the days $days. A compaction
-- that rewrites such files keeps their rows' times (not their commit time), so a zone
-- whose forwarding stopped does not look live again.
SELECT zone, max(max_ts) AS forwarded
FROM file_stats
WHERE list_contains($zones, zone)
  AND list_contains($days, day)
  AND min_source = 'forwarded'
  AND max_source = 'forwarded'
GROUP BY zone;
