"""Shield zones: WAF review, API validation spec, upload-scanning metrics, event logs, enums."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from enum import IntEnum
from typing import Annotated, Any

import msgspec

from cdnlake.client.area import Area, Model, check_id
from cdnlake.client.error_bodies import (
    GenericRequestResponse,
    problem_details,
    status_code_result,
)
from cdnlake.errors import ApiError, RequestValidationError

EVENT_LOG_DATE = re.compile(r"^(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])-\d{4}$")


class ReviewActionType(IntEnum):
    Ignore = 0
    LogOnly = 1
    DisableRule = 2


class UpdateReviewTriggeredRuleRequest(Model, forbid_unknown_fields=True):
    ruleId: str | None
    action: ReviewActionType


class UpdateReviewTriggeredRuleResponse(Model):
    errorResponse: GenericRequestResponse | None = None
    success: bool = False


class AuthScheme(Model):
    schemeName: str | None = None
    schemeType: str | None = None
    location: str | None = None
    credentialName: str | None = None
    httpScheme: str | None = None


class ParameterSets(Model):
    Path: list[str] = []
    Query: list[str] = []
    Header: list[str] = []
    Cookie: list[str] = []


class ValidationConfiguration(Model):
    shieldZoneId: int | None = None
    isEnabled: bool | None = None
    executionMode: int | None = None
    bodyLimitAction: int | None = None
    unmatchedPathAction: int | None = None
    title: str | None = None
    version: str | None = None
    maxEndpoints: int | None = None
    maxFieldsPerType: int | None = None
    maxNestingDepth: int | None = None
    maxTotalSchemaNodes: int | None = None
    maxTotalRegexLength: int | None = None
    createdAt: datetime | None = None
    updatedAt: datetime | None = None


class ValidationEndpoint(Model):
    apiGuardianEndpointId: int | None = None
    shieldZoneId: int | None = None
    requestMethod: str | None = None
    requestPath: str | None = None
    validateRequestBodySchema: bool | None = None
    validateResponseBodySchema: bool | None = None
    validateAuthorization: bool | None = None
    isEnabled: bool | None = None
    authSchemes: list[AuthScheme] = []
    requestBodySchemaYaml: str | None = None
    responseBodySchemasYaml: dict[str, Any] | None = None
    availableParameters: ParameterSets | None = None
    injectionDetectionParameters: ParameterSets | None = None
    detectParameterXss: bool | None = None
    detectParameterSqli: bool | None = None
    rateLimitingEnabled: bool | None = None
    rateLimitingType: str | None = None
    rateLimitingRequestCount: int | None = None
    rateLimitingTimeframe: int | None = None
    createdAt: datetime | None = None
    updatedAt: datetime | None = None


class ValidationSpecData(Model):
    configuration: ValidationConfiguration | None = None
    endpoints: list[ValidationEndpoint] = []


class ApiValidationSpecResponse(Model):
    error: GenericRequestResponse | None = None
    data: ValidationSpecData | None = None


class UploadScanningData(Model):
    overviewPastTwentyEightDays: dict[str, Any] | None = None
    totalLoggedRequests: int | None = None
    totalBlockedRequests: int | None = None
    totalFilesScanned: int | None = None


class UploadScanningMetrics(Model):
    error: GenericRequestResponse | None = None
    data: UploadScanningData | None = None


class EventLabels(Model):
    asn: str | None = None
    country: str | None = None
    ruleId: str | None = None
    severity: str | None = None
    method: str | None = None
    ruleGroup: str | None = None
    status: str | None = None
    serverZone: str | None = None


class EventLog(Model):
    logId: str
    timestamp: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # epoch seconds or ms
    log: str | None = None
    labels: dict[str, Any] = {}


class ShieldEventLogPage(Model):
    # Each event as the provider sent it; decode_events() types them one by one, so that
    # an event that does not fit costs itself, not its page.
    logs: list[msgspec.Raw] | None = None
    hasMoreData: bool = False
    continuationToken: str | None = None
    startToken: str | None = None
    errorResponse: GenericRequestResponse | None = None


class SupportedValues(Model):
    values: list[str] = []
    editable: bool | None = None


class RecommendedOperator(Model):
    operator: int | None = None
    values: list[str] = []


class WafEnumValue(Model):
    optionalInput: bool | None = None
    isPremium: bool | None = None
    name: str | None = None
    value: int | None = None
    supportedValues: SupportedValues | None = None
    recommendedOperator: RecommendedOperator | None = None


class WafEnum(Model):
    enumName: str
    enumValues: list[WafEnumValue] = []


class WafEnumMappings(Model):
    data: list[WafEnum] = []


@dataclass(frozen=True)
class BadEvent:
    """An event of a page that does not decode: where it was, why, and its text."""

    index: int
    reason: str
    text: str
    log_id: str | None


_EVENT = msgspec.json.Decoder(EventLog, strict=False)


def decode_events(page: ShieldEventLogPage) -> tuple[list[EventLog], list[BadEvent]]:
    """A page's events, typed, and those that are not events (a missing ``logId``, a
    ``timestamp`` of the wrong type), each with msgspec's reason naming the field."""
    events: list[EventLog] = []
    bad: list[BadEvent] = []
    for index, raw in enumerate(page.logs or []):
        try:
            events.append(_EVENT.decode(raw))
        except msgspec.DecodeError as exc:
            value = msgspec.json.decode(raw)
            log_id = value.get("logId") if isinstance(value, dict) else None
            text = bytes(raw).decode()
            bad.append(BadEvent(index, str(exc), text, log_id if isinstance(log_id, str) else None))
    return events, bad


def event_log_date(value: date | str) -> str:
    """The path's ``MM-dd-yyyy``; a string must already be a real date in that form."""
    if isinstance(value, date):
        return value.strftime("%m-%d-%Y")
    if not EVENT_LOG_DATE.match(value):
        raise RequestValidationError("date", f"expected MM-dd-yyyy, got {value!r}")
    try:
        datetime.strptime(value, "%m-%d-%Y")
    except ValueError:
        raise RequestValidationError("date", f"not a real date: {value!r}") from None
    return value


def review_request(
    request: UpdateReviewTriggeredRuleRequest | dict[str, Any],
) -> UpdateReviewTriggeredRuleRequest:
    if isinstance(request, UpdateReviewTriggeredRuleRequest):
        return request
    try:
        return msgspec.convert(request, UpdateReviewTriggeredRuleRequest)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if "unknown field" in text.lower():
            field = text.split("`")[1] if "`" in text else "request"
            raise RequestValidationError(field, "unknown property (none are allowed)") from None
        if "action" in text:
            raise RequestValidationError(
                "action", "must be 0 (Ignore), 1 (LogOnly) or 2 (DisableRule)"
            ) from None
        raise RequestValidationError("request", text) from None


class ShieldApi(Area):
    def review_triggered_rule(
        self,
        shield_zone_id: int,
        request: UpdateReviewTriggeredRuleRequest | dict[str, Any],
    ) -> UpdateReviewTriggeredRuleResponse:
        """Apply a review action to a triggered WAF rule; a refusal raises ApiError."""
        check_id("shieldZoneId", shield_zone_id)
        body = review_request(request)
        result = self._call(
            "POST",
            f"/shield/waf/rules/review-triggered/{shield_zone_id}",
            UpdateReviewTriggeredRuleResponse,
            parser=status_code_result,
            json=msgspec.to_builtins(body),
        )
        if not result.success:
            err = result.errorResponse or GenericRequestResponse()
            raise ApiError(
                err.message or "review was not applied",
                status=err.statusCode,
                code=err.errorKey,
                request_line=f"POST /shield/waf/rules/review-triggered/{shield_zone_id}",
                details=err,
            )
        return result

    def update_api_validation_spec(
        self, shield_zone_id: int, content: str, enforce_authorization_validation: bool = False
    ) -> ApiValidationSpecResponse:
        check_id("shieldZoneId", shield_zone_id)
        if not content.strip():
            raise RequestValidationError("content", "the OpenAPI document is empty")
        return self._call(
            "PATCH",
            f"/shield/shield-zone/{shield_zone_id}/api-guardian/spec",
            ApiValidationSpecResponse,
            parser=problem_details,
            json={
                "content": content,
                "enforceAuthorizationValidation": enforce_authorization_validation,
            },
        )

    def upload_scanning_metrics(self, shield_zone_id: int) -> UploadScanningMetrics:
        check_id("shieldZoneId", shield_zone_id)
        return self._call(
            "GET",
            f"/shield/metrics/shield-zone/{shield_zone_id}/upload-scanning",
            UploadScanningMetrics,
            parser=status_code_result,
        )

    def event_logs(
        self, shield_zone_id: int, day: date | str, continuation_token: str | None = None
    ) -> ShieldEventLogPage:
        """One page: the first is asked for without a token, later ones with the token of
        the page before (as the provider's own clients do)."""
        check_id("shieldZoneId", shield_zone_id)
        path = f"/shield/event-logs/{shield_zone_id}/{event_log_date(day)}"
        if continuation_token is not None:
            if not continuation_token or "/" in continuation_token:
                raise RequestValidationError("continuationToken", "must be a non-empty token")
            path += f"/{continuation_token}"
        return self._call("GET", path, ShieldEventLogPage, parser=problem_details)

    def iter_event_logs(self, shield_zone_id: int, day: date | str) -> Iterator[ShieldEventLogPage]:
        """Every page of a day, following ``continuationToken`` while ``hasMoreData``; an
        empty or missing token means there is no further page."""
        token: str | None = None
        seen: set[str] = set()
        while True:
            page = self.event_logs(shield_zone_id, day, token)
            yield page
            if not page.hasMoreData or not page.continuationToken:
                return
            if page.continuationToken in seen:
                raise ApiError("event log continuation token repeats", code="token_loop")
            seen.add(page.continuationToken)
            token = page.continuationToken

    def waf_enums(self) -> WafEnumMappings:
        return self._call("GET", "/shield/waf/enums", WafEnumMappings, parser=status_code_result)
