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
    file         VARCHAR,            -- local path, or api:v1:<MM-dd-yy>/<zone>.log, or api:v2
    line_number  BIGINT,
    reason       VARCHAR,
    raw_line     VARCHAR,            -- the line as received, Authorization field redacted
    rejected_at  TIMESTAMPTZ,
    run_id       VARCHAR,
    PRIMARY KEY (pull_zone_id, file, line_number)
);
