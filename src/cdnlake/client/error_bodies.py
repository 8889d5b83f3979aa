"""The error body shapes of the management API, as typed models, and their parsers.

Each endpoint names its own shape in the seed; the client maps by HTTP status first and
then reads the body, so a body of another shape (or none) still gives the right error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from cdnlake.client.core import ErrorBody, ErrorParser


class GenericRequestResponse(msgspec.Struct):
    """``GenericRequestResponse``: also the ``error`` / ``errorResponse`` member."""

    statusCode: int | None = None
    success: bool = False
    message: str | None = None
    errorKey: str | None = None


class StatusCodeResult(msgspec.Struct):
    """``{statusCode}``: shield metrics, shield enums and review errors (``UnauthorizedResult``)."""

    statusCode: int | None = None


class ProblemDetails(msgspec.Struct):
    type: str | None = None
    title: str | None = None
    status: int | None = None
    detail: str | None = None
    instance: str | None = None


class FieldError(msgspec.Struct):
    ErrorKey: str | None = None
    Field: str | None = None
    Message: str | None = None


class ContainerNodeErrorItem(msgspec.Struct):
    message: str | None = None
    field: str | None = None


class ContainerNodeError(msgspec.Struct):
    title: str | None = None
    status: int | None = None
    detail: str | None = None
    instance: str | None = None
    errors: list[ContainerNodeErrorItem] = []
    id: str | None = None


M = TypeVar("M")


def shape_parser(
    model: type[M],
    code: Callable[[M], str | None],
    message: Callable[[M], str | None],
) -> ErrorParser:
    def parse(body: Any) -> ErrorBody:
        if not isinstance(body, dict):
            return ErrorBody()
        try:
            typed = msgspec.convert(body, model, strict=False)
        except msgspec.ValidationError:
            return ErrorBody()
        return ErrorBody(code(typed), message(typed), typed)

    return parse


generic_result = shape_parser(GenericRequestResponse, lambda m: m.errorKey, lambda m: m.message)
status_code_result = shape_parser(
    StatusCodeResult, lambda m: None, lambda m: f"status {m.statusCode}" if m.statusCode else None
)
problem_details = shape_parser(ProblemDetails, lambda m: m.title, lambda m: m.detail or m.title)
field_error = shape_parser(
    FieldError,
    lambda m: m.ErrorKey,
    lambda m: f"{m.Field}: {m.Message}" if m.Field else m.Message,
)
container_node_error = shape_parser(
    ContainerNodeError,
    lambda m: m.title,
    lambda m: (
        "; ".join(
            [m.detail or m.title or ""] + [f"{e.field}: {e.message}" for e in m.errors]
        ).strip("; ")
        or None
    ),
)
