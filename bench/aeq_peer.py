"""ai-edge-quantizer, the bench's peer for the weight modes: one recipe on one float .tflite.
Runs in the venv of bench/aeq-requirements.txt (`make bench` builds it); never imported by qtool
or its tests.

    python -m bench.aeq_peer FLOAT.tflite OUT.tflite RECIPE [--calibration SAMPLES.npy]

RECIPE is a function of `ai_edge_quantizer.recipe` (dynamic_wi8_afp32, weight_only_wi8_afp32,
dynamic_wi4_afp32, dynamic_wi4b32_afp32, static_wi8_ai8, ...). A static recipe calibrates on
SAMPLES (one sample per row, fed in order to the default signature's one input, a batch
dimension added as the model declares it). Exit 0 with OUT written, or exit 1 with the
quantizer's refusal on the last line of stderr.
"""

from __future__ import annotations

import argparse
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("recipe")
    parser.add_argument("--calibration", help="samples (.npy) for a static recipe")
    args = parser.parse_args()
    from ai_edge_quantizer import quantizer, recipe

    try:
        run = quantizer.Quantizer(args.source)
        run.load_quantization_recipe(getattr(recipe, args.recipe)())
        found = (
            run.calibrate(_calibration(args.source, args.calibration)) if args.calibration else None
        )
        run.quantize(found).export_model(args.out, overwrite=True)
    except Exception as error:  # the peer's refusal is a result to report
        lines = [line for line in str(error).splitlines() if line.strip()] or [""]
        print(f"{type(error).__name__}: {lines[-1][:200]}", file=sys.stderr)
        sys.exit(1)


def _calibration(source: str, samples: str) -> dict:
    """{signature: [{input name: sample}, ...]} for the model's one-input default signature."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    (key, inputs), *_ = Interpreter(model_path=source).get_signature_list().items()
    (name,) = inputs["inputs"]
    runner = Interpreter(model_path=source).get_signature_runner(key)
    shape = runner.get_input_details()[name]["shape"]
    data = np.load(samples)
    return {key: [{name: row.reshape(shape).astype(np.float32)} for row in data]}


if __name__ == "__main__":
    main()
