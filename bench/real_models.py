"""Real trained models and real images, for development and `make bench` (never `make test`).

Models: the float `.tflite` files inside the `mediapipe` wheel on PyPI (`pip download
--no-deps`, unpacked here; nothing is installed). Images: the photographs bundled with
scikit-image (the `bench` extra), cut into random crops at each model's input size and scaled to
the value range MediaPipe's own graphs feed the model.

Calibration and held-out samples come from disjoint sets of photographs, so accuracy is always
judged on images calibration never saw. Development samples (`make_development_data`) are other
crops of the calibration photographs: what a change to qtool is studied and tuned on, so that
the held-out photographs stay unseen by every decision.

    python -m bench.real_models            # fetch models, write data, list what is there
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.cache import cache_root, unpack, wheel

CACHE = cache_root() / "real_models"  # build/real_models, or under $QTOOL_BENCH_CACHE
MEDIAPIPE_VERSION = "0.10.21"  # the last wheels that carry the solution models as .tflite files
CALIBRATION_SAMPLES = 64
HOLDOUT_SAMPLES = 64
DEVELOPMENT_SAMPLES = 64


@dataclass(frozen=True)
class RealModel:
    name: str
    value_range: tuple[float, float]  # what MediaPipe's graph feeds the input
    development: bool  # the accuracy issue's list; the others check nothing was tuned to it
    note: str = ""


MODELS = {
    m.name: m
    for m in (
        RealModel("face_detection_short_range", (-1.0, 1.0), True),
        RealModel("hand_landmark_lite", (0.0, 1.0), True),
        RealModel("palm_detection_lite", (0.0, 1.0), True),
        RealModel("pose_detection", (-1.0, 1.0), True),
        RealModel("selfie_segmentation", (0.0, 1.0), True),
        RealModel("iris_landmark", (0.0, 1.0), True),
        RealModel("face_detection_full_range_sparse", (-1.0, 1.0), False),
        RealModel("face_landmark", (0.0, 1.0), False),
        RealModel("hand_landmark_full", (0.0, 1.0), False),
        RealModel("hand_recrop", (0.0, 1.0), False),
        RealModel("palm_detection_full", (0.0, 1.0), False),
        RealModel("pose_landmark_full", (0.0, 1.0), False),
        RealModel("selfie_segmentation_landscape", (0.0, 1.0), False),
    )
}
# face_landmark_with_attention is left out: its MediaPipe custom ops (Landmarks2TransformMatrix,
# TransformLandmarks, TransformTensorBilinear) run in neither LiteRT nor the numpy engine, so no
# produced model could be checked.

# scikit-image's bundled photographs (no download at run time). Grey images become RGB.
CALIBRATION_IMAGES = (
    "astronaut",
    "coffee",
    "stereo_motorcycle",
    "hubble_deep_field",
    "immunohistochemistry",
    "coins",
    "moon",
    "page",
    "grass",
    "gravel",
    "cell",
)
HOLDOUT_IMAGES = ("chelsea", "rocket", "camera", "brick", "retina")
# scikit-image's lfw_subset: 100 face crops (then 100 non-face crops, not used); faces 0-74
# calibrate, 75-99 hold out.
FACES, FACES_SPLIT = 100, 75
MIN_CROP_STD = 0.05  # pixel standard deviation (values in [0, 1]) below which a crop is flat


def fetch_models(cache: Path = CACHE) -> Path:
    """Download the mediapipe wheel (no dependencies, not installed) and unpack its models."""
    models = cache / "models"
    if all((models / f"{name}.tflite").exists() for name in MODELS):
        return models

    def wanted(member: str) -> str | None:
        stem = Path(member).stem
        return f"{stem}.tflite" if member.endswith(".tflite") and stem in MODELS else None

    unpack(wheel("mediapipe", MEDIAPIPE_VERSION, cache / "wheels"), models, wanted)
    return models


def model_path(name: str, cache: Path = CACHE) -> Path:
    return fetch_models(cache) / f"{name}.tflite"


def _photographs(names: tuple[str, ...]) -> list[np.ndarray]:
    from skimage import data  # the bench extra

    images = []
    for name in names:
        image = getattr(data, name)()
        if isinstance(image, tuple):  # a stereo pair: the left view
            image = image[0]
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        images.append(image[..., :3].astype(np.float32) / 255.0)
    return images


def _faces(holdout: bool) -> list[np.ndarray]:
    from skimage import data

    faces = data.lfw_subset()[:FACES]  # 25 x 25 grey, float in [0, 1]
    chosen = faces[FACES_SPLIT:] if holdout else faces[:FACES_SPLIT]
    return [np.stack([f] * 3, axis=-1).astype(np.float32) for f in chosen]


def _content_crop(
    images: list[np.ndarray], size: tuple[int, int], rng: np.random.Generator
) -> np.ndarray:
    """A random crop with the model's aspect ratio that shows something: flat crops (the black
    border of the retina photograph) make some detectors output values 100x their usual range,
    and one such sample would dominate every SQNR figure."""
    height, width = size
    while True:
        image = images[rng.integers(len(images))]
        rows, cols = image.shape[:2]
        scale = rng.uniform(0.3, 1.0)
        crop_h = max(8, int(min(rows, cols * height / width) * scale))
        crop_w = max(8, int(crop_h * width / height))
        top = rng.integers(0, rows - crop_h + 1)
        left = rng.integers(0, cols - crop_w + 1)
        crop = image[top : top + crop_h, left : left + crop_w]
        if crop.std() > MIN_CROP_STD:
            return crop


def _crops(
    images: list[np.ndarray], faces: list[np.ndarray], count: int, size: tuple[int, int], seed: int
) -> np.ndarray:
    """Random crops (a quarter of them whole faces) resized to `size`, randomly mirrored."""
    from skimage.transform import resize

    rng = np.random.default_rng(seed)
    height, width = size
    out = np.empty((count, height, width, 3), np.float32)
    for i in range(count):
        crop = faces[rng.integers(len(faces))] if i % 4 == 3 else _content_crop(images, size, rng)
        crop = resize(crop, (height, width), anti_aliasing=True, preserve_range=True)
        out[i] = crop[:, ::-1] if rng.random() < 0.5 else crop
    return np.clip(out, 0.0, 1.0)


def make_data(name: str, cache: Path = CACHE) -> tuple[Path, Path]:
    """`(calibration.npy, holdout.npy)` for a model, written once and reused."""
    model = MODELS[name]
    target = cache / "data"
    calibration, holdout = target / f"{name}_calib.npy", target / f"{name}_holdout.npy"
    if calibration.exists() and holdout.exists():
        return calibration, holdout
    from qtool.calibrate import model_inputs
    from qtool.model import load_model

    (spec,) = model_inputs(load_model(model_path(name, cache)))
    size = tuple(spec.sample_shape[:2])
    low, high = model.value_range
    target.mkdir(parents=True, exist_ok=True)
    for path, images, faces, count, seed in (
        (calibration, _photographs(CALIBRATION_IMAGES), _faces(False), CALIBRATION_SAMPLES, 1),
        (holdout, _photographs(HOLDOUT_IMAGES), _faces(True), HOLDOUT_SAMPLES, 2),
    ):
        samples = _crops(images, faces, count, size, seed)
        np.save(path, (low + samples * (high - low)).astype(np.float32))
    return calibration, holdout


def make_development_data(name: str, cache: Path = CACHE) -> Path:
    """`development.npy` for a model, written once and reused: crops (another seed) of the
    calibration photographs and faces, never of the held-out ones."""
    model = MODELS[name]
    path = cache / "data" / f"{name}_development.npy"
    if path.exists():
        return path
    calibration, _ = make_data(name, cache)
    size = tuple(np.load(calibration, mmap_mode="r").shape[1:3])
    samples = _crops(
        _photographs(CALIBRATION_IMAGES), _faces(False), DEVELOPMENT_SAMPLES, size, seed=3
    )
    low, high = model.value_range
    np.save(path, (low + samples * (high - low)).astype(np.float32))
    return path


def main() -> None:
    models = fetch_models()
    for name, model in MODELS.items():
        calibration, _ = make_data(name)
        kind = "development" if model.development else "held-out model"
        print(f"{name:34s} {kind:15s} {models / (name + '.tflite')}  {calibration.name}")


if __name__ == "__main__":
    main()
