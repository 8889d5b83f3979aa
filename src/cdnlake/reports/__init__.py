"""Daily cache-status and error reports (html, csv, json, md) from the named queries."""
