-- The newest run of each zone among runs that finished at or after $since. Pull zone
-- and shield zone ids are separate numberings, so the two kinds are ranked apart.
SELECT zone, source = 'shield' AS shield, outcome, error, finished, rejected
FROM ingest_runs
WHERE finished >= $since
QUALIFY row_number() OVER (
    PARTITION BY zone, source = 'shield' ORDER BY finished DESC
) = 1;
