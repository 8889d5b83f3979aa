-- `maintain` still holds the lease (and its request) for another ttl seconds.
UPDATE cdnlake_leases
SET expires = now() + %(ttl)s * interval '1 second',
    wanted_until = now() + %(ttl)s * interval '1 second'
WHERE fleet = %(fleet)s AND zone_key = %(key)s AND owner = %(daemon)s
  AND wanted_by = %(daemon)s
RETURNING zone_key
