"""Regenerate ``report.schema.json`` from the report model: ``python -m auditor.report.schema``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from auditor.report.schema import SCHEMA_FILE, schema_text

DEFAULT_OUTPUT = Path(__file__).with_name(SCHEMA_FILE)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the schema file, or with ``--check`` return 1 when the file is out of date."""
    parser = argparse.ArgumentParser(prog="python -m auditor.report.schema", description=__doc__)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="file to write or check")
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    args = parser.parse_args(argv)
    text = schema_text()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
        if current != text:
            sys.stderr.write(f"{args.output} is out of date; run `python -m auditor.report.schema`\n")
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
