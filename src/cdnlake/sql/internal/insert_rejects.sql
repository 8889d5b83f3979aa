-- rejects_batch: a registered frame with line_number, reason, raw_line, kind, request_id.
-- A v2 record is kept once by its request id however many windows read it again; a line
-- of a file once by its file and line number.
INSERT OR IGNORE INTO rejected_lines
    (pull_zone_id, source, file, line_number, reason, raw_line, rejected_at, run_id, kind,
     request_id, record_key)
SELECT $zone, $source, $file, line_number, reason, raw_line, $rejected_at, $run_id, kind,
    request_id,
    CASE WHEN $source = 'v2' THEN 'v2:' || coalesce(request_id, 'md5:' || md5(raw_line))
         ELSE $file || ':' || line_number END
FROM rejects_batch;
