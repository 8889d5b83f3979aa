INSERT INTO ingest_gaps VALUES ($zone, $gap_from, $gap_to, $reason, $detected_at, $run_id);
