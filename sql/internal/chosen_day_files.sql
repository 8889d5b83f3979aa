-- The add actions of a table partitioned by zone and date (registered as ``actions``)
-- whose zone (``chosen_zone``) is one of $zones and date (``chosen_day``) one of $days;
-- either condition holds for every file when its list is NULL.
SELECT * EXCLUDE (chosen_zone, chosen_day)
FROM actions
WHERE ($zones IS NULL OR list_contains($zones, chosen_zone))
  AND ($days IS NULL OR list_contains($days, chosen_day));
