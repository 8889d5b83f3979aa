-- The fingerprint of the requests files each rolled-up partition (_rollup) was computed
-- from; of the days $first to $last only, or of every day when they are NULL.
SELECT DISTINCT pull_zone_id, date, files_hash
FROM cdnlake_internal._rollup
WHERE $first IS NULL OR date BETWEEN $first AND $last;
