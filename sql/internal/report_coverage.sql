-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- Per pull zone of a report, the start of the first window the lake asked the provider
-- for: the lake holds nothing earlier, so a first day that starts after midnight is a
-- partial day.
SELECT zone, min(window_from) AS first_from
FROM ingest_runs
WHERE source <> 'shield'
  AND ($zone IS NULL OR zone = $zone)
GROUP BY zone
ORDER BY zone;
