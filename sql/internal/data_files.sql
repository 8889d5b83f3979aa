-- The snapshot's data files (its add actions, registered as `actions`: the path, the rows and
-- the log's null counts of the table's columns, $columns of them), or only those $paths
-- names, as paths under $base, split by whether their statistics name every column (its
-- rows and a count for each). Such a file holds them all; another may have been written
-- before the table gained a column.
SELECT
    coalesce(list(file) FILTER (WHERE complete), []) AS complete,
    coalesce(list(file) FILTER (WHERE NOT complete), []) AS partial
FROM (
    SELECT
        $base || '/' || url_decode(path) AS file,
        list_count([*COLUMNS('^(num_records|null_count\..*)$')]) = $columns + 1 AS complete
    FROM actions
    WHERE $paths IS NULL OR path IN (SELECT unnest($paths::VARCHAR[]))
)
