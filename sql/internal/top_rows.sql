-- `cdnlake top`: the rows of the data files in the session's variable ``top_files`` (the
-- files whose ``ts`` statistics overlap the window, chosen on the Delta log; on local
-- disk), zone and day from their partition folders. Only the columns top reads.
CREATE OR REPLACE TEMP VIEW top_rows AS
SELECT pull_zone_id, ts, cache_status, status_code, bytes_sent, host, path, country_code,
       user_agent, remote_ip, source
FROM read_parquet(
    getvariable('top_files'),
    hive_partitioning = true,
    hive_types = {'pull_zone_id': BIGINT, 'date': DATE},
    hive_types_autocast = false,
    union_by_name = true
);
