-- `maintain` takes the lease it asked for once it is free (lapsed or let go), with a new
-- generation like any take; the previous owner's rate window (quiet_until) is kept, as
-- maintain makes no request to the provider.
UPDATE cdnlake_leases AS l
SET owner = %(daemon)s,
    acquired = now(),
    expires = now() + %(ttl)s * interval '1 second',
    generation = greatest(old.generation + 1, extract(epoch FROM now())::bigint)
FROM cdnlake_leases AS old
WHERE l.fleet = %(fleet)s AND l.zone_key = %(key)s
  AND old.fleet = l.fleet AND old.zone_key = l.zone_key
  AND (l.expires <= now() OR l.owner = %(daemon)s)
  AND l.wanted_by = %(daemon)s
RETURNING l.generation
