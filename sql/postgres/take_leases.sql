-- Take the free leases among these keys (expired, released, or already ours). Each row
-- says how long the previous owner's requests may still count against the zone's rate
-- budget: the new owner waits that long before its first request. Two daemons taking
-- one lease at once: the second re-checks `expires` on the row the first wrote, and
-- skips it. Every take gets a new, larger generation: the fence token its passes carry
-- into the lake (never below the clock's seconds, so a database made anew still grows it).
-- A lease `maintain` asks for is left to it.
UPDATE cdnlake_leases AS l
SET owner = %(daemon)s,
    acquired = now(),
    expires = now() + %(ttl)s * interval '1 second',
    quiet_until = now() + (%(ttl)s + %(window)s) * interval '1 second',
    generation = greatest(old.generation + 1, extract(epoch FROM now())::bigint)
FROM cdnlake_leases AS old
WHERE l.fleet = %(fleet)s AND l.zone_key = ANY(%(keys)s)
  AND old.fleet = l.fleet AND old.zone_key = l.zone_key
  AND (l.expires <= now() OR l.owner = %(daemon)s)
  AND (l.wanted_by IN ('', %(daemon)s) OR l.wanted_until <= now())
RETURNING l.zone_key,
          old.owner,
          extract(epoch FROM greatest(old.quiet_until, now()) - now())::float8 AS wait_seconds,
          l.generation
