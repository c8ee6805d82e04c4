"""Write ``report.json`` and validate report dicts against the packaged JSON Schema."""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.report.model import Report
from auditor.report.schema import load_schema

if TYPE_CHECKING:  # jsonschema loads only when a report is validated, not on every scan that writes JSON
    from jsonschema import Draft202012Validator

_MAX_MESSAGE = 200


class ReportValidationError(ValueError):
    """A report dict does not match the report schema; ``problems`` holds (path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {path}: {message}" for path, message in problems)
        super().__init__(f"report does not match the report schema ({len(problems)} problem(s)):\n{lines}")


def report_to_dict(report: Report) -> dict[str, Any]:
    """Return the report as JSON-ready data, keys in model field order."""
    return report.model_dump(mode="json")


def write_json(report: Report, path: str | Path) -> None:
    """Write the report as indented UTF-8 JSON to ``path``."""
    text = json.dumps(report_to_dict(report), indent=2, ensure_ascii=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


def validate_report_dict(data: Any) -> None:
    """Validate ``data`` against the packaged schema.

    Raises:
        ReportValidationError: listing every failing path (``$.findings[0].severity``) with its message.
    """
    errors = sorted(_validator().iter_errors(data), key=lambda error: list(map(str, error.absolute_path)))
    if errors:
        raise ReportValidationError([(_json_path(e.absolute_path), _shorten(e.message)) for e in errors])


@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _json_path(parts: Iterable[str | int]) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _shorten(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"
