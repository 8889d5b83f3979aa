-- The first daemon to claim a fleet job does it; a claim whose daemon died expires.
INSERT INTO cdnlake_fleet_jobs AS j (fleet, job, daemon, started, expires)
VALUES (%(fleet)s, %(job)s, %(daemon)s, now(), now() + %(ttl)s * interval '1 second')
ON CONFLICT (fleet, job) DO UPDATE
SET daemon = excluded.daemon, started = now(), expires = excluded.expires
WHERE j.finished IS NULL AND j.expires <= now()
RETURNING job
