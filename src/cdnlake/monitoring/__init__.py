"""What operators watch: the daemon's Prometheus metrics and its health endpoint."""
