-- _fresh: the requests partitions whose rollup was computed from the files they hold
-- now, with that fingerprint; handed over as three lists of one length.
CREATE OR REPLACE TABLE cdnlake_internal._fresh AS
SELECT unnest($zones::BIGINT[])   AS pull_zone_id,
       unnest($dates::DATE[])     AS date,
       unnest($hashes::VARCHAR[]) AS files_hash;
