-- The add actions of a table partitioned by zone alone (registered as ``actions``) whose
-- zone (``chosen_zone``) is one of $zones; every one when $zones is NULL.
SELECT * EXCLUDE (chosen_zone)
FROM actions
WHERE $zones IS NULL OR list_contains($zones, chosen_zone);
