-- Warehouse bookkeeping relations (see shared/contract/product.md).
-- `requests` and `shield_events` are views over the Parquet lake, created by cdnlake.
CREATE TABLE IF NOT EXISTS cdnlake_meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR
);

CREATE TABLE IF NOT EXISTS ingest_runs (
    run_id             VARCHAR,
    pull_zone_id       BIGINT,
    source             VARCHAR,      -- v2, v1, v1-file, shield
    started            TIMESTAMPTZ,
    finished           TIMESTAMPTZ,
    window_from        TIMESTAMPTZ,
    window_to          TIMESTAMPTZ,
    pages              INTEGER,
    rows               BIGINT,       -- new rows that reached the lake
    duplicates_dropped BIGINT,
    rejected           BIGINT,
    rate_limited       INTEGER,      -- 429 answers received
    retries            INTEGER,
    server_errors      INTEGER,
    transport_errors   INTEGER,
    outcome            VARCHAR,      -- ok, failed, busy, stopped
    error              VARCHAR
);

CREATE TABLE IF NOT EXISTS ingest_gaps (
    pull_zone_id BIGINT,
    gap_from     TIMESTAMPTZ,
    gap_to       TIMESTAMPTZ,
    reason       VARCHAR,
    detected_at  TIMESTAMPTZ,
    run_id       VARCHAR
);

CREATE TABLE IF NOT EXISTS rejected_lines (
    pull_zone_id BIGINT,
    source       VARCHAR,            -- v1 or v2
    file         VARCHAR,            -- local path, api:v1:<MM-dd-yy>/<zone>.log, or the v2
                                     -- query: api:v2?from=<iso>&to=<iso>
    line_number  BIGINT,             -- v1: line in the file; v2: offset in the query
    reason       VARCHAR,
    raw_line     VARCHAR,            -- the line as received, Authorization field redacted
    rejected_at  TIMESTAMPTZ,
    run_id       VARCHAR,
    kind         VARCHAR,            -- what summaries count it by, e.g. 'bad timestamp'
    request_id   VARCHAR,            -- where the line or record has one
    record_key   VARCHAR,            -- each rejected record once: v1 <file>:<line>,
                                     -- v2 v2:<request id> (or v2:md5:<raw> without one)
    PRIMARY KEY (pull_zone_id, record_key)
);
