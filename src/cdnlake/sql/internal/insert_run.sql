INSERT INTO ingest_runs VALUES ($run_id, $zone, $source, $started, $finished, $window_from,
    $window_to, $pages, $rows, $duplicates, $rejected, $rate_limited, $retries,
    $server_errors, $transport_errors, $outcome, $error);
