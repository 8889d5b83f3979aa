-- `maintain` is done with the zone: the lease is free at once for its daemon, whose rate
-- window (quiet_until) is as that daemon left it.
UPDATE cdnlake_leases
SET owner = CASE WHEN owner = %(daemon)s THEN '' ELSE owner END,
    expires = CASE WHEN owner = %(daemon)s THEN now() ELSE expires END,
    wanted_by = '',
    wanted_until = '-infinity'
WHERE fleet = %(fleet)s AND zone_key = %(key)s AND wanted_by = %(daemon)s
