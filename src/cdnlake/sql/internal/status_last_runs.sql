-- The newest run of each zone. Pull zone and shield zone ids are separate numberings,
-- so the two kinds are ranked apart.
SELECT pull_zone_id, source = 'shield' AS shield, outcome, error, finished, rejected
FROM ingest_runs
QUALIFY row_number() OVER (
    PARTITION BY pull_zone_id, source = 'shield' ORDER BY finished DESC
) = 1;
