-- The newest run of each zone. Pull zone and shield zone ids are separate numberings,
-- so the two kinds are ranked apart.
SELECT zone, source = 'shield' AS shield, outcome, error, finished, rejected
FROM ingest_runs
QUALIFY row_number() OVER (
    PARTITION BY zone, source = 'shield' ORDER BY finished DESC
) = 1;
