-- The leases `maintain` (or another holder) asks for now: their owner lets them go once
-- its pass in flight ends.
SELECT zone_key
FROM cdnlake_leases
WHERE fleet = %(fleet)s AND wanted_by NOT IN ('', %(daemon)s) AND wanted_until > now()
