"""What the static check did with each file of a scanned directory (recorded in the load-safety verdict)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FileCoverage(BaseModel):
    """One file of a scanned directory (or a part of a file) and what the static check did with it."""

    model_config = ConfigDict(extra="forbid")

    file: str
    kind: str = Field(description="What its bytes are: torch-zip, legacy-pickle, numpy, text, tar data ...")
    status: Literal["checked", "no-code", "not-judged", "refused"] = Field(
        description="checked: every pickle in it was inspected; no-code: no loader runs code from it (data, text); "
                    "not-judged: a loader would run code from it and the check cannot judge it (the verdict "
                    "cannot PASS); refused: not read (it resolves outside the directory)")
    reason: str = ""


def not_judged(files: list[FileCoverage]) -> list[FileCoverage]:
    """The files a loader would run code from that the static check could not judge."""
    return [f for f in files if f.status == "not-judged"]
