-- answers: Where visitors come from: requests by the referring host ("(direct)" without a referer).
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
WITH hosts AS (
    SELECT CASE
               WHEN referer IS NULL THEN '(direct)'
               WHEN regexp_extract(referer, '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#:]+)', 1) = ''
                   THEN '(other)'
               ELSE lower(regexp_extract(referer, '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#:]+)', 1))
           END AS referer_host
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
),
counted AS (
    SELECT referer_host, count(*) AS requests
    FROM hosts
    GROUP BY referer_host
),
numbered AS (
    SELECT referer_host,
           requests,
           round(100.0 * requests / sum(requests) OVER (), 2)                   AS pct,
           row_number() OVER (ORDER BY requests DESC, referer_host)            AS place
    FROM counted
)
SELECT referer_host, requests, pct
FROM numbered
WHERE place <= $top_n
ORDER BY place;
