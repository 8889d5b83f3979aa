-- Leases this daemon still holds; one it lost to another daemon is not returned.
UPDATE cdnlake_leases
SET expires = now() + %(ttl)s * interval '1 second',
    quiet_until = now() + (%(ttl)s + %(window)s) * interval '1 second'
WHERE fleet = %(fleet)s AND owner = %(daemon)s AND zone_key = ANY(%(keys)s)
RETURNING zone_key
