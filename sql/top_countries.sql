-- answers: Requests and bytes by the client's country ("-" where the provider did not know it).
-- param: day DATE                  UTC day, YYYY-MM-DD
-- param: zone BIGINT = NULL        pull zone id (NULL: all zones)
-- param: top_n INTEGER = 10        rows
WITH counted AS (
    SELECT coalesce(country_code, '-') AS country_code,
           count(*) AS requests,
           coalesce(sum(bytes_sent), 0) AS bytes
    FROM requests
    WHERE date = $day
      AND ($zone IS NULL OR pull_zone_id = $zone)
    GROUP BY coalesce(country_code, '-')
),
numbered AS (
    SELECT country_code, requests, bytes,
           round(100.0 * requests / sum(requests) OVER (), 2)            AS pct,
           row_number() OVER (ORDER BY requests DESC, country_code)     AS place
    FROM counted
)
SELECT country_code, requests, bytes, pct
FROM numbered
WHERE place <= $top_n
ORDER BY place;
