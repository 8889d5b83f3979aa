SELECT pull_zone_id, outcome, error, finished, rate_limited
FROM ingest_runs
QUALIFY row_number() OVER (PARTITION BY pull_zone_id ORDER BY finished DESC) = 1;
