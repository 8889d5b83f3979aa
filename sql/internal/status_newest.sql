-- Each zone's newest row: the greatest ``max_ts`` of its files' statistics, among the
-- files (``file_stats``: zone, day, max_ts) of the zones $zones on the days $days (NULL:
-- every day). No data file is read.
SELECT zone, max(max_ts) AS newest
FROM file_stats
WHERE list_contains($zones, zone)
  AND ($days IS NULL OR list_contains($days, day))
GROUP BY zone;
