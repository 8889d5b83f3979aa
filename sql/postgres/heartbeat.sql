-- This daemon is alive for another ttl seconds and configured for these zones.
INSERT INTO cdnlake_daemons AS d (fleet, daemon_id, host, pid, started, heartbeat, expires, zones)
VALUES (%(fleet)s, %(daemon)s, %(host)s, %(pid)s, now(), now(),
        now() + %(ttl)s * interval '1 second', %(zones)s)
ON CONFLICT (fleet, daemon_id) DO UPDATE
SET heartbeat = now(), expires = excluded.expires, zones = excluded.zones
