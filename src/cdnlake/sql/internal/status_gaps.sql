SELECT pull_zone_id,
       count(*) AS gaps,
       sum(epoch(gap_to) - epoch(gap_from)) AS lost_seconds
FROM ingest_gaps
WHERE detected_at >= $since
GROUP BY pull_zone_id;
