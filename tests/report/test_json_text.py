"""Readable JSON: json.dumps(indent=2)'s layout, arrays of scalars on one line."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from qtool.report.json_text import readable_json

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def _scalar_lists(value) -> bool:
    if isinstance(value, dict):
        return any(_scalar_lists(v) for v in value.values())
    if isinstance(value, list):
        return any(not isinstance(v, dict | list) for v in value) or any(
            _scalar_lists(v) for v in value
        )
    return False


@given(values)
def test_the_text_reads_back_as_the_value(value) -> None:
    assert json.loads(readable_json(value)) == value


@given(values)
def test_the_layout_is_json_dumps_indent_2_but_for_arrays_of_scalars(value) -> None:
    if not _scalar_lists(value):
        assert readable_json(value) == json.dumps(value, indent=2) + "\n"


def test_an_array_of_scalars_stays_on_one_line() -> None:
    text = readable_json({"tensor": {"scale": [0.5, 0.25], "zero_point": [0, 1]}, "ids": [1]})
    assert text == (
        "{\n"
        '  "tensor": {\n'
        '    "scale": [0.5, 0.25],\n'
        '    "zero_point": [0, 1]\n'
        "  },\n"
        '  "ids": [1]\n'
        "}\n"
    )


def test_keys_that_are_not_strings_follow_json_dumps() -> None:
    value = {1: "a", 2.5: "b", False: "c", None: "d"}
    assert json.loads(readable_json(value)) == json.loads(json.dumps(value))
