-- rejects_batch: a registered frame with line_number, reason, raw_line.
INSERT OR IGNORE INTO rejected_lines
SELECT $zone, $source, $file, line_number, reason, raw_line, $rejected_at, $run_id
FROM rejects_batch;
