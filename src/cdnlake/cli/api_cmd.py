"""``cdnlake api AREA ACTION``: every management API area, JSON on stdout.

Secrets are never taken from the command line (other users can read it in ``ps``):
``--secret-env NAME`` names an environment variable, ``--secret-file PATH`` (or ``-`` for
standard input) a file.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from datetime import date, datetime
from typing import Any

from cdnlake.errors import UsageError


def _action(area: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = area.add_parser(name, help=help_text, description=help_text)
    p.set_defaults(action=name)
    return p


def _paging(p: argparse.ArgumentParser, per_page: int, per_page_name: str) -> None:
    p.add_argument("--page", type=int, default=1, help="page number (default 1)")
    p.add_argument(
        f"--{per_page_name}",
        dest="per_page",
        type=int,
        default=per_page,
        help=f"items per page (default {per_page})",
    )
    p.add_argument("--all", action="store_true", help="walk every page, print all items")


def _secret_source(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--secret-env", metavar="NAME", help="read the secret from this env var")
    group.add_argument(
        "--secret-file", metavar="PATH", help="read the secret from a file (- = stdin)"
    )


def _show_passwords(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--show-passwords",
        action="store_true",
        help="print the storage zone's passwords (masked as *** by default)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    areas = p.add_subparsers(dest="area", metavar="AREA", required=True)

    shield = areas.add_parser("shield", help="shield zones: WAF, API validation, metrics, events")
    acts = shield.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = _action(acts, "review", "Review a triggered WAF rule (apply an action to it).")
    a.add_argument("--zone", type=int, required=True, help="shield zone id")
    a.add_argument("--rule-id", required=True, help="id of the triggered rule")
    a.add_argument(
        "--action", dest="review_action", required=True, help="0|Ignore, 1|LogOnly or 2|DisableRule"
    )
    a = _action(acts, "update-spec", "Upload an OpenAPI document as the API validation spec.")
    a.add_argument("--zone", type=int, required=True, help="shield zone id")
    a.add_argument("--file", required=True, help="OpenAPI document (JSON or YAML), - for stdin")
    a.add_argument(
        "--enforce-authorization", action="store_true", help="set enforceAuthorizationValidation"
    )
    a = _action(acts, "metrics", "Upload-scanning metrics of a shield zone.")
    a.add_argument("--zone", type=int, required=True, help="shield zone id")
    a = _action(acts, "event-logs", "Shield event logs of one UTC day.")
    a.add_argument("--zone", type=int, required=True, help="shield zone id")
    a.add_argument(
        "--date",
        type=log_day,
        required=True,
        metavar="YYYY-MM-DD",
        help="day of the logs (the API's own MM-dd-yyyy is accepted too)",
    )
    a.add_argument("--token", default=None, help="continuation token (default: the first page)")
    a.add_argument("--all", action="store_true", help="follow continuation tokens to the end")
    _action(acts, "waf-enums", "WAF enum mappings.")

    compute = areas.add_parser("compute", help="compute scripts: secrets")
    acts = compute.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = _action(acts, "add-secret", "Add a named secret to a script (the value is not echoed).")
    a.add_argument("--script", type=int, required=True, help="script id")
    a.add_argument("--name", required=True, help="secret name")
    _secret_source(a)
    a = _action(acts, "update-secret", "Replace the value of a script secret.")
    a.add_argument("--script", type=int, required=True, help="script id")
    a.add_argument("--secret-id", type=int, required=True, help="secret id")
    _secret_source(a)

    pullzone = areas.add_parser(
        "pullzone",
        help="pull zones: custom hostnames, log forwarding, permanent log storage "
        "(add-hostname, set-forwarding, set-archive, show-archive)",
    )
    acts = pullzone.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = _action(acts, "add-hostname", "Add a custom hostname to a pull zone.")
    a.add_argument("--zone", type=int, required=True, help="pull zone id")
    a.add_argument("--hostname", required=True, help="the hostname")
    a = _action(
        acts,
        "set-forwarding",
        "Have the provider push a pull zone's logs to a syslog endpoint (a daemon's "
        "[forwarding] listen), as plain v1 lines or JSON objects, or stop with --disable.",
    )
    a.add_argument("--zone", type=int, required=True, help="pull zone id")
    a.add_argument("--host", help="host name or address the provider sends to")
    a.add_argument("--port", type=int, help="port the provider sends to")
    a.add_argument("--protocol", choices=["tcp", "tls", "udp"], help="as [forwarding] protocol")
    a.add_argument(
        "--format",
        dest="log_format",
        choices=["plain", "json"],
        help="what each message carries: a plain v1 log line or a JSON object (not given: "
        "the zone keeps its format, plain for a zone that never forwarded); the receiver "
        "takes both",
    )
    a.add_argument("--disable", action="store_true", help="stop forwarding the zone's logs")
    a = _action(
        acts,
        "set-archive",
        "Have the provider archive a pull zone's logs in a storage zone (permanent log "
        "storage, what `cdnlake backfill` reads), or stop with --disable.",
    )
    a.add_argument("--zone", type=int, required=True, help="pull zone id")
    a.add_argument("--storage-zone", type=int, help="id of the storage zone to archive into")
    a.add_argument("--disable", action="store_true", help="stop archiving the zone's logs")
    a = _action(
        acts,
        "show-archive",
        "A pull zone's permanent log storage: on or off, and the storage zone it writes to.",
    )
    a.add_argument("--zone", type=int, required=True, help="pull zone id")
    _show_passwords(a)

    storagezone = areas.add_parser(
        "storagezone", help="storage zones: list, get (passwords masked unless asked)"
    )
    acts = storagezone.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = _action(acts, "list", "Storage zones of the account.")
    a.add_argument("--search", help="only zones whose name holds this")
    _show_passwords(a)
    a = _action(acts, "get", "One storage zone.")
    a.add_argument("--id", dest="storage_zone", type=int, required=True, help="storage zone id")
    _show_passwords(a)

    video = areas.add_parser("video", help="video library: videos, collections, oEmbed")
    acts = video.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = _action(acts, "list-videos", "Videos of a library.")
    a.add_argument("--library", type=int, required=True, help="video library id")
    _paging(a, 100, "items-per-page")
    a = _action(acts, "list-collections", "Collections of a library.")
    a.add_argument("--library", type=int, required=True, help="video library id")
    _paging(a, 100, "items-per-page")
    a = _action(acts, "resolutions", "Resolution and storage information of a video.")
    a.add_argument("--library", type=int, required=True, help="video library id")
    a.add_argument("--video", required=True, help="video guid")
    a = _action(acts, "oembed", "oEmbed data for a video URL.")
    a.add_argument("--url", required=True, help="video URL")
    a.add_argument("--max-width", type=int, help="maximum width")
    a.add_argument("--max-height", type=int, help="maximum height")

    dns = areas.add_parser("dns", help="DNS zones: records")
    acts = dns.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = _action(acts, "list-records", "Records of a DNS zone.")
    a.add_argument("--zone", type=int, required=True, help="DNS zone id")
    a.add_argument(
        "--type", dest="record_type", help="record type: 0..15 or a name (A, CNAME, ...)"
    )
    _paging(a, 100, "per-page")

    containers = areas.add_parser("containers", help="container network: node IPs")
    acts = containers.add_subparsers(dest="action", metavar="ACTION", required=True)
    _action(acts, "list-node-ips", "IP addresses of the container network's nodes.")


def _read_secret(args: argparse.Namespace) -> str:
    if args.secret_env:
        value = os.environ.get(args.secret_env)
        if value is None:
            raise UsageError(f"--secret-env: environment variable {args.secret_env} is not set")
        return value
    if args.secret_file == "-":
        return sys.stdin.read().rstrip("\n")
    try:
        with open(args.secret_file, encoding="utf-8") as f:
            return f.read().rstrip("\n")
    except OSError as exc:
        raise UsageError(f"--secret-file: cannot read {args.secret_file}: {exc.strerror}") from None


def _review_action(text: str) -> int:
    from cdnlake.client.shield import ReviewActionType

    if text.isdigit():
        return int(text)  # range checked by the client, naming the field
    try:
        return int(ReviewActionType[text])
    except KeyError:
        raise UsageError(
            f"--action: expected 0-2 or Ignore/LogOnly/DisableRule, got {text!r}"
        ) from None


def _record_type(text: str | None) -> int | None:
    from cdnlake.client.dns import DnsRecordType

    if text is None:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return int(
            DnsRecordType[text.upper() if text.upper() in DnsRecordType.__members__ else text]
        )
    except KeyError:
        raise UsageError(f"--type: unknown record type {text!r}") from None


def log_day(text: str) -> date:
    """A day as every other command takes it (YYYY-MM-DD), or as the API writes it."""
    for parse in (date.fromisoformat, lambda t: datetime.strptime(t, "%m-%d-%Y").date()):
        try:
            return parse(text)
        except ValueError:
            pass
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}|\d{2}-\d{2}-\d{4}", text):
        raise argparse.ArgumentTypeError(f"not a real date: {text!r}")
    raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD (or MM-dd-yyyy), got {text!r}")


def _set_forwarding(cdn: Any, args: argparse.Namespace) -> Any:
    given = [f"--{k}" for k in ("host", "port", "protocol") if getattr(args, k) is not None]
    if args.log_format is not None:
        given.append("--format")
    if args.disable:
        if given:
            raise UsageError(f"set-forwarding: --disable takes no {', '.join(given)}")
        return cdn.pullzone.disable_forwarding(args.zone)
    missing = [k for k in ("--host", "--port", "--protocol") if k not in given]
    if missing:
        raise UsageError(f"set-forwarding: {', '.join(missing)} needed (or --disable)")
    return cdn.pullzone.set_forwarding(
        args.zone, args.host, args.port, args.protocol, args.log_format
    )


def _set_archive(cdn: Any, args: argparse.Namespace) -> Any:
    if args.disable:
        if args.storage_zone is not None:
            raise UsageError("set-archive: --disable takes no --storage-zone")
        return cdn.pullzone.disable_archive(args.zone)
    if args.storage_zone is None:
        raise UsageError("set-archive: --storage-zone needed (or --disable)")
    return cdn.pullzone.set_archive(args.zone, args.storage_zone)


def _storage_zone(zone: Any, show: bool) -> Any:
    return zone if show else zone.masked()


def _show_archive(cdn: Any, args: argparse.Namespace) -> Any:
    settings = cdn.pullzone.get_pull_zone(args.zone)
    store = None
    if settings.logging_storage_zone_id:
        store = _storage_zone(
            cdn.storagezone.get_storage_zone(settings.logging_storage_zone_id),
            args.show_passwords,
        )
    return {
        "pullZoneId": settings.id,
        "pullZoneName": settings.name,
        "enabled": settings.logging_save_to_storage,
        "storageZoneId": settings.logging_storage_zone_id or None,
        "storageZone": store,
        # The folder the provider writes under, in that storage zone.
        "folder": f"pullzone-logs/{settings.name}/" if settings.name else None,
    }


def run(cdn: Any, args: argparse.Namespace) -> Any:
    area, action = args.area, args.action
    if area == "shield":
        if action == "review":
            return cdn.shield.review_triggered_rule(
                args.zone, {"ruleId": args.rule_id, "action": _review_action(args.review_action)}
            )
        if action == "update-spec":
            if args.file == "-":
                content = sys.stdin.read()
            else:
                try:
                    with open(args.file, encoding="utf-8") as f:
                        content = f.read()
                except OSError as exc:
                    raise UsageError(f"--file: cannot read {args.file}: {exc.strerror}") from None
            return cdn.shield.update_api_validation_spec(
                args.zone, content, args.enforce_authorization
            )
        if action == "metrics":
            return cdn.shield.upload_scanning_metrics(args.zone)
        if action == "event-logs":
            if args.all:
                return [
                    log
                    for page in cdn.shield.iter_event_logs(args.zone, args.date)
                    for log in page.logs or []
                ]
            return cdn.shield.event_logs(args.zone, args.date, args.token)
        if action == "waf-enums":
            return cdn.shield.waf_enums()
    if area == "compute":
        secret = _read_secret(args)
        if action == "add-secret":
            return cdn.compute.add_script_secret(args.script, args.name, secret)
        return cdn.compute.update_script_secret(args.script, args.secret_id, secret)
    if area == "pullzone":
        if action == "set-forwarding":
            return _set_forwarding(cdn, args)
        if action == "set-archive":
            return _set_archive(cdn, args)
        if action == "show-archive":
            return _show_archive(cdn, args)
        cdn.pullzone.add_hostname(args.zone, args.hostname)
        return {"added": args.hostname, "pullZoneId": args.zone}
    if area == "video":
        if action == "list-videos":
            if args.all:
                return list(cdn.video.iter_videos(args.library, args.per_page))
            return cdn.video.list_videos(args.library, args.page, args.per_page)
        if action == "list-collections":
            if args.all:
                return list(cdn.video.iter_collections(args.library, args.per_page))
            return cdn.video.list_collections(args.library, args.page, args.per_page)
        if action == "resolutions":
            return cdn.video.video_resolutions(args.library, args.video)
        return cdn.video.oembed(args.url, args.max_width, args.max_height)
    if area == "dns":
        rtype = _record_type(args.record_type)
        if args.all:
            return list(cdn.dns.iter_records(args.zone, args.per_page, rtype))
        return cdn.dns.list_records(args.zone, args.page, args.per_page, rtype)
    if area == "containers":
        return cdn.containers.list_node_ips()
    if area == "storagezone":
        if action == "list":
            return [
                _storage_zone(z, args.show_passwords)
                for z in cdn.storagezone.iter_storage_zones(search=args.search)
            ]
        return _storage_zone(
            cdn.storagezone.get_storage_zone(args.storage_zone), args.show_passwords
        )
    raise UsageError(f"api: unknown action {area} {action}")  # pragma: no cover


def api(args: argparse.Namespace) -> int:
    import msgspec

    from cdnlake.cli.common import load, open_api
    from cdnlake.client import CdnApi

    config = load(args, default_level="WARNING", lake=False)  # the API only
    needs_key = not (args.area == "video" and args.action == "oembed")
    with open_api(config, require_key=needs_key) as client:
        result = run(CdnApi(client), args)
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(result), indent=2).decode() + "\n")
    return 0
