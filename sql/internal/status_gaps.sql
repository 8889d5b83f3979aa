-- Gaps per zone detected since $since. Pull zone and shield zone ids are separate
-- numberings, so the two kinds are counted apart.
SELECT zone, source = 'shield' AS shield,
       count(*) AS gaps,
       sum(epoch(gap_to) - epoch(gap_from)) AS lost_seconds
FROM ingest_gaps
WHERE detected_at >= $since
GROUP BY ALL;
