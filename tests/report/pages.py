"""Pages the HTML tests look at: quantizations of the committed fixtures, one of them with
names that need escaping (markup, a control character, bytes that are not UTF-8)."""

from __future__ import annotations

import functools
from html.parser import HTMLParser

import numpy as np

import qtool
from qtool.model import load_model, model_to_bytes
from tests.conftest import DATA, MODELS

# multi_io's tensors renamed: both outputs and the concatenation between them.
AWKWARD_NAMES = {
    19: b'class <probs> & "scores"',
    23: b"\xff\xfereg\nout",
    21: b"</script><script>alert(1)</script>",
}


def fixture_data(name: str, part: str = "calib") -> dict[str, np.ndarray]:
    with np.load(DATA / f"{name}_{part}.npz") as data:
        return {key: data[key] for key in data.files}


@functools.cache
def awkward_quantization() -> qtool.Quantized:
    """multi_io with awkward names, quantized with every section of the page in use: an op
    kept in float, a target SQNR reached with remedies, the analysis, the per-layer SQNR."""
    model = load_model(MODELS / "multi_io.tflite")
    for t, name in AWKWARD_NAMES.items():
        model.subgraphs[0].tensors[t].name = name
    return qtool.quantize_model(
        model_to_bytes(model),
        fixture_data("multi_io"),
        holdout=fixture_data("multi_io", "holdout"),
        keep_float=("MEAN",),
        target_sqnr=40,
        allow_float=True,
        analyze=True,
        layer_sqnr=True,
    )


class PageOutline(HTMLParser):
    """Sections (by id) with the SVG elements in each, every script, and every attribute that
    could load something."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.svgs: dict[str, int] = {}
        self.scripts = 0
        self.links: list[str] = []
        self._section: str | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section":
            self._section = found.get("id") or "?"
            self.svgs[self._section] = 0
        elif tag == "svg" and self._section is not None:
            self.svgs[self._section] += 1
        elif tag == "script":
            self.scripts += 1
        self.links += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action")]

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = None
