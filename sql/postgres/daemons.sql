-- The live daemons, and those gone within the last hour (for status).
SELECT daemon_id, started, heartbeat, expires > now() AS live
FROM cdnlake_daemons
WHERE fleet = %(fleet)s AND expires > now() - interval '1 hour'
ORDER BY daemon_id
