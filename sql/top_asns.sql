-- answers: Requests by the client's network (ASN), where the logs carry it (v2 extended logging).
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
WITH counted AS (
    SELECT asn, max(asn_organization) AS asn_organization, count(*) AS requests
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND asn IS NOT NULL
    GROUP BY asn
),
numbered AS (
    SELECT asn, asn_organization, requests,
           round(100.0 * requests / sum(requests) OVER (), 2)   AS pct,
           row_number() OVER (ORDER BY requests DESC, asn)     AS place
    FROM counted
)
SELECT asn, asn_organization, requests, pct
FROM numbered
WHERE place <= $top_n
ORDER BY place;
