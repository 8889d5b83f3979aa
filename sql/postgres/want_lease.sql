-- `maintain` asks for a zone's lease until %(wait)s seconds from now (again while it waits
-- or holds it); a request of another holder still in force is left alone.
UPDATE cdnlake_leases
SET wanted_by = %(daemon)s, wanted_until = now() + %(wait)s * interval '1 second'
WHERE fleet = %(fleet)s AND zone_key = %(key)s
  AND (wanted_by IN ('', %(daemon)s) OR wanted_until <= now())
RETURNING zone_key
