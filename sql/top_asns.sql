-- answers: Requests by the client's network (ASN), where the logs carry it (v2 extended logging).
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
-- param: host VARCHAR = NULL       slice: only this host (NULL: every host)
-- param: path_prefix VARCHAR = NULL    slice: only the paths that start with this
-- param: country VARCHAR = NULL    slice: only this country code ("-": unknown)
-- param: status_class VARCHAR = NULL {1xx|2xx|3xx|4xx|5xx}  slice: only this status class
-- param: cache_status VARCHAR = NULL   slice: only this cache status
WITH counted AS (
    SELECT asn, max(asn_organization) AS asn_organization, count(*) AS requests
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
      AND ($host IS NULL OR lower(host) = lower($host))
      AND ($path_prefix IS NULL OR substr(path, 1, length($path_prefix)) = $path_prefix)
      AND ($country IS NULL OR coalesce(country_code, '-') = upper($country))
      AND ($status_class IS NULL
           OR CAST(CAST(floor(status_code / 100) AS INTEGER) AS VARCHAR) || 'xx' = $status_class)
      AND ($cache_status IS NULL OR cache_status = upper($cache_status))
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
