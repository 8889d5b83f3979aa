"""Pull zones: add a custom hostname; send the zone's logs to a syslog endpoint; archive
them in a storage zone (permanent log storage)."""

from __future__ import annotations

from typing import Literal

from cdnlake.client.area import Area, Model, check_id, check_range
from cdnlake.client.error_bodies import field_error
from cdnlake.errors import RequestValidationError

ForwardingProtocol = Literal["udp", "tcp", "tls"]
ForwardingFormat = Literal["plain", "json"]
# PullZoneLogForwarderProtocolType: 0 UDP, 1 TCP, 2 TCPEncrypted (3 DataDog is not syslog)
PROTOCOL_CODES: dict[str, int] = {"udp": 0, "tcp": 1, "tls": 2}
# PullZoneLogFormat: 0 Plain (the v1 line), 1 JSON
FORMAT_CODES: dict[str, int] = {"plain": 0, "json": 1}


class LogForwarding(Model, rename="pascal"):
    """The log forwarding settings of a pull zone, as the updated zone reports them."""

    id: int
    log_forwarding_enabled: bool = False
    log_forwarding_hostname: str | None = None
    log_forwarding_port: int = 0
    log_forwarding_protocol: int | None = None
    log_forwarding_format: int | None = None


class PullZoneLogging(Model, rename="pascal"):
    """A pull zone's logging settings (part of ``PullZoneModel``): forwarding and
    permanent log storage (``LoggingSaveToStorage`` into ``LoggingStorageZoneId``)."""

    id: int
    name: str | None = None
    enable_logging: bool = True
    logging_save_to_storage: bool = False
    logging_storage_zone_id: int = 0
    log_forwarding_enabled: bool = False
    log_forwarding_hostname: str | None = None
    log_forwarding_port: int | None = None
    log_forwarding_protocol: int | None = None
    log_forwarding_format: int | None = None


class PullZoneApi(Area):
    def get_pull_zone(self, pull_zone_id: int) -> PullZoneLogging:
        """``GET /pullzone/{id}``: the zone's logging settings."""
        check_id("id", pull_zone_id)
        return self._call("GET", f"/pullzone/{pull_zone_id}", PullZoneLogging, parser=field_error)

    def set_archive(self, pull_zone_id: int, storage_zone_id: int) -> PullZoneLogging:
        """Archive the zone's logs into ``storage_zone_id`` (permanent log storage)."""
        check_id("id", pull_zone_id)
        check_id("LoggingStorageZoneId", storage_zone_id)
        return self._call(
            "POST",
            f"/pullzone/{pull_zone_id}",
            PullZoneLogging,
            parser=field_error,
            json={"LoggingSaveToStorage": True, "LoggingStorageZoneId": storage_zone_id},
        )

    def disable_archive(self, pull_zone_id: int) -> PullZoneLogging:
        check_id("id", pull_zone_id)
        return self._call(
            "POST",
            f"/pullzone/{pull_zone_id}",
            PullZoneLogging,
            parser=field_error,
            json={"LoggingSaveToStorage": False},
        )

    def add_hostname(self, pull_zone_id: int, hostname: str) -> None:
        """Add ``hostname``; the seed shows no response body, so nothing is returned."""
        check_id("id", pull_zone_id)
        if not isinstance(hostname, str) or len(hostname) < 1:
            raise RequestValidationError("Hostname", "at least 1 character")
        self._call(
            "POST",
            f"/pullzone/{pull_zone_id}/addHostname",
            None,
            parser=field_error,
            json={"Hostname": hostname},
        )

    def set_forwarding(
        self,
        pull_zone_id: int,
        host: str,
        port: int,
        protocol: ForwardingProtocol,
        log_format: ForwardingFormat | None = None,
    ) -> LogForwarding:
        """Forward the zone's logs to ``host:port`` as RFC 5424 syslog, each message's text a
        plain v1 line or (``log_format="json"``) a JSON object; None keeps the zone's format
        (the update sends only the keys it changes)."""
        check_id("id", pull_zone_id)
        if not isinstance(host, str) or not host.strip() or any(c.isspace() for c in host):
            raise RequestValidationError("LogForwardingHostname", "a host name or address")
        check_range("LogForwardingPort", port, 1, 65535)
        if protocol not in PROTOCOL_CODES:
            raise RequestValidationError(
                "LogForwardingProtocol", f"one of udp, tcp, tls, got {protocol!r}"
            )
        if log_format is not None and log_format not in FORMAT_CODES:
            raise RequestValidationError(
                "LogForwardingFormat", f"one of plain, json, got {log_format!r}"
            )
        settings: dict[str, object] = {
            "LogForwardingEnabled": True,
            "LogForwardingHostname": host,
            "LogForwardingPort": port,
            "LogForwardingProtocol": PROTOCOL_CODES[protocol],
        }
        if log_format is not None:
            settings["LogForwardingFormat"] = FORMAT_CODES[log_format]
        return self._update(pull_zone_id, settings)

    def disable_forwarding(self, pull_zone_id: int) -> LogForwarding:
        check_id("id", pull_zone_id)
        return self._update(pull_zone_id, {"LogForwardingEnabled": False})

    def _update(self, pull_zone_id: int, settings: dict[str, object]) -> LogForwarding:
        """``POST /pullzone/{id}`` (Update Pull Zone) with only the keys to change."""
        return self._call(
            "POST", f"/pullzone/{pull_zone_id}", LogForwarding, parser=field_error, json=settings
        )
