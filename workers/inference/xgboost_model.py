"""A trained xgboost model, loaded for inference from its directory (``model.json`` + ``card.json``).

``model.json`` is xgboost's own JSON format, loadable with plain ``xgboost.Booster(model_file=...)``; the card
holds the columns, the task and the class labels. The same code serves evaluation and batch prediction on
executors and online prediction in the driver. Executor-side: stdlib, numpy, xgboost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workers import storage
from workers.inference.answer import prediction_answer
from workers.inference.cache import ModelCache

MODEL_FILE = "model.json"
CARD_FILE = "card.json"


@dataclass
class XGBoostModel:
    directory: Path
    card: dict[str, Any]
    booster: Any

    @classmethod
    def load(cls, uri: str, *, threads: int | None = None) -> XGBoostModel:
        import xgboost

        directory = storage.fetch_dir(uri)
        booster = xgboost.Booster(model_file=str(directory / MODEL_FILE))
        if threads is not None:
            booster.set_param({"nthread": threads})
        card = json.loads((directory / CARD_FILE).read_text())
        return cls(directory, card, booster)

    @property
    def classification(self) -> bool:
        return self.card.get("task") == "classification"

    @property
    def class_labels(self) -> list[Any] | None:
        labels = self.card.get("class_labels")
        return list(labels) if labels else None

    def outputs(self, x: np.ndarray, batch_size: int | None = None) -> np.ndarray:
        """``(n, features)`` -> class probabilities ``(n, k)``, P(class 1) ``(n, 1)`` or values ``(n, 1)``."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if len(x) == 0:
            width = int(self.card.get("num_classes") or 2) if self.classification else 1
            return np.zeros((0, 1 if width <= 2 else width))
        out = np.asarray(self.booster.inplace_predict(x, validate_features=False), dtype=np.float64)
        return out.reshape(len(x), -1)

    def predict(self, x: np.ndarray, *, as_lists: bool = True) -> dict[str, Any]:
        """The same answer shape as :meth:`TorchModel.predict`."""
        out = self.outputs(x)
        return prediction_answer(out, classification=self.classification, labels=self.class_labels, as_lists=as_lists)


_WORKER_CACHE = ModelCache(4)


def cached(uri: str) -> XGBoostModel:
    """The model for ``uri``, loaded once per Python worker process (one thread: a task owns one core)."""
    model: XGBoostModel = _WORKER_CACHE.get(uri, lambda: XGBoostModel.load(uri, threads=1))
    return model
