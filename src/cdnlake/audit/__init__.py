"""The completeness audit: the lake's hourly counts against the provider's statistics."""
