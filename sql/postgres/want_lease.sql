-- `maintain` asks for a zone's lease for one lease time (%(ttl)s seconds), again at every
-- step while it waits: a maintain that dies while waiting keeps the zone from its owner no
-- longer than that. A request of another holder still in force is left alone.
UPDATE cdnlake_leases
SET wanted_by = %(daemon)s, wanted_until = now() + %(ttl)s * interval '1 second'
WHERE fleet = %(fleet)s AND zone_key = %(key)s
  AND (wanted_by IN ('', %(daemon)s) OR wanted_until <= now())
RETURNING zone_key
