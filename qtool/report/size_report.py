"""The report's size section: where the bytes of the source and of the written model go, and,
when the quantized model is bigger than its source, which parts grew."""

from __future__ import annotations

from typing import Any

from qtool.model import Model
from qtool.model.sizes import size_breakdown


def size_section(source: Model, source_bytes: int, output: Model, output_bytes: int) -> dict:
    """Both breakdowns, the ratio, and the parts that grew (largest growth first)."""
    before = size_breakdown(source, source_bytes)
    after = size_breakdown(output, output_bytes)
    parts = dict.fromkeys([*before.parts, *after.parts])
    growth = sorted(
        (
            {"part": part, "bytes": after.parts.get(part, 0) - before.parts.get(part, 0)}
            for part in parts
        ),
        key=lambda row: -row["bytes"],
    )
    return {
        "ratio": round(output_bytes / source_bytes, 4) if source_bytes else None,
        "bigger_than_input": output_bytes > source_bytes,
        "grew": [row for row in growth if row["bytes"] > 0],
        "input": before.to_dict(),
        "output": after.to_dict(),
    }


def size_warning(section: dict[str, Any]) -> str | None:
    """One line saying that the output is bigger than its source and why, or None."""
    if not section["bigger_than_input"]:
        return None
    total_in, total_out = section["input"]["total_bytes"], section["output"]["total_bytes"]
    why = ", ".join(f"{row['part']} {row['bytes']:+,}" for row in section["grew"][:3])
    return (
        f"the written model ({total_out:,} bytes) is bigger than its source ({total_in:,} "
        f"bytes): {why} bytes (qtool inspect --sizes shows both)"
    )
