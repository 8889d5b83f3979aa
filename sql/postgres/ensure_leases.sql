INSERT INTO cdnlake_leases (fleet, zone_key)
SELECT %(fleet)s, key FROM unnest(%(keys)s::text[]) AS key
ON CONFLICT (fleet, zone_key) DO NOTHING
