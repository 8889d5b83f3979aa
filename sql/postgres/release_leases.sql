-- Free these leases now; the next owner waits out this daemon's rate window.
UPDATE cdnlake_leases
SET owner = '', expires = now(), quiet_until = now() + %(window)s * interval '1 second'
WHERE fleet = %(fleet)s AND owner = %(daemon)s AND zone_key = ANY(%(keys)s)
