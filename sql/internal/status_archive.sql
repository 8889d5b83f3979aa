-- Per pull zone and UTC day its archive holds (as the last backfill or archive job listed
-- it in archive_parts): parts listed, and how many are imported, damaged, open (may still
-- grow) or closed but not imported yet.
SELECT zone,
       day,
       count(*)                                    AS parts,
       count(*) FILTER (WHERE state = 'imported')  AS imported,
       count(*) FILTER (WHERE state = 'damaged')   AS damaged,
       count(*) FILTER (WHERE state = 'open')      AS open
FROM archive_parts
GROUP BY zone, day
ORDER BY zone, day;
