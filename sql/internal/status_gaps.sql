-- Gaps per zone: the union of the spans claimed lost that were detected since $since or
-- reach past it (an outage still going on extends its gap). Overlapping or touching spans
-- count once, as one gap. Pull zone and shield zone ids are separate numberings, so the
-- two kinds are counted apart.
WITH spans AS (
    SELECT zone, source = 'shield' AS shield, gap_from, gap_to
    FROM ingest_gaps
    WHERE (detected_at >= $since OR gap_to >= $since) AND gap_to > gap_from
),
reached AS (
    SELECT *, max(gap_to) OVER (
        PARTITION BY zone, shield ORDER BY gap_from, gap_to
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS reach
    FROM spans
),
islands AS (
    SELECT *, sum(CASE WHEN reach IS NULL OR gap_from > reach THEN 1 ELSE 0 END) OVER (
        PARTITION BY zone, shield ORDER BY gap_from, gap_to ROWS UNBOUNDED PRECEDING
    ) AS island
    FROM reached
),
gaps AS (
    SELECT zone, shield, min(gap_from) AS gap_from, max(gap_to) AS gap_to
    FROM islands
    GROUP BY zone, shield, island
)
SELECT zone, shield,
       count(*) AS gaps,
       sum(epoch(gap_to) - epoch(gap_from)) AS lost_seconds
FROM gaps
GROUP BY ALL;
