-- The coordination tables, made once by whichever daemon starts first (under an
-- advisory lock, so that two first starts do not race). `fleet` is the lake's URI:
-- several lakes may share one database.
CREATE TABLE IF NOT EXISTS cdnlake_daemons (
    fleet     text        NOT NULL,
    daemon_id text        NOT NULL,            -- host:pid, as in ingest_runs.daemon
    host      text        NOT NULL,
    pid       integer     NOT NULL,
    started   timestamptz NOT NULL,
    heartbeat timestamptz NOT NULL,
    expires   timestamptz NOT NULL,            -- live while expires > now()
    zones     text[]      NOT NULL,            -- the zone keys its config names
    PRIMARY KEY (fleet, daemon_id)
);
CREATE TABLE IF NOT EXISTS cdnlake_leases (
    fleet       text        NOT NULL,
    zone_key    text        NOT NULL,          -- requests/<id> or shield_events/<id>
    owner       text        NOT NULL DEFAULT '',
    acquired    timestamptz,
    expires     timestamptz NOT NULL DEFAULT '-infinity',
    quiet_until timestamptz NOT NULL DEFAULT '-infinity',  -- the last owner's budget window
    generation  bigint      NOT NULL DEFAULT 0,  -- grows at every take: the lake's fence
    PRIMARY KEY (fleet, zone_key)
);
ALTER TABLE cdnlake_leases ADD COLUMN IF NOT EXISTS generation bigint NOT NULL DEFAULT 0;
-- Asked for by `maintain` (its holder id) until wanted_until: the owner lets the lease go
-- once its pass in flight ends, and no daemon takes it meanwhile.
ALTER TABLE cdnlake_leases ADD COLUMN IF NOT EXISTS wanted_by text NOT NULL DEFAULT '';
ALTER TABLE cdnlake_leases ADD COLUMN IF NOT EXISTS wanted_until timestamptz NOT NULL
    DEFAULT '-infinity';
CREATE TABLE IF NOT EXISTS cdnlake_fleet_jobs (
    fleet    text        NOT NULL,
    job      text        NOT NULL,             -- report/<day>, maintain/<day>
    daemon   text        NOT NULL,
    started  timestamptz NOT NULL,
    expires  timestamptz NOT NULL,
    finished timestamptz,
    PRIMARY KEY (fleet, job)
);
