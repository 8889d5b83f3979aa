SELECT daemon_id, zones
FROM cdnlake_daemons
WHERE fleet = %(fleet)s AND expires > now()
ORDER BY daemon_id
