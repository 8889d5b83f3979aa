-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- What the lake asked the provider for, per pull zone of a report: the start of its first
-- window (the lake holds nothing earlier, so a first day that starts after midnight is a
-- partial day) and the end of its newest window that ended well.
SELECT zone,
       min(window_from)                                AS first_from,
       max(window_to) FILTER (WHERE outcome = 'ok')    AS last_to
FROM ingest_runs
WHERE source <> 'shield'
  AND ($zone IS NULL OR zone = $zone)
GROUP BY zone
ORDER BY zone;
