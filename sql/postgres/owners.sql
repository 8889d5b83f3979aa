-- Who holds each zone now (for status).
SELECT zone_key, owner
FROM cdnlake_leases
WHERE fleet = %(fleet)s AND owner <> '' AND expires > now()
