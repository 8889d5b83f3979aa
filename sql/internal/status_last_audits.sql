-- Each pull zone's last audited day (the completeness audit's, in audit_days).
SELECT *
FROM audit_days
QUALIFY row_number() OVER (PARTITION BY pull_zone_id ORDER BY day DESC) = 1;
