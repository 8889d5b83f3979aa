UPDATE cdnlake_fleet_jobs
SET finished = CASE WHEN %(done)s THEN now() END, expires = now()
WHERE fleet = %(fleet)s AND job = %(job)s AND daemon = %(daemon)s
