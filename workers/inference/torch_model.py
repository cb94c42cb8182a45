"""A trained torch model, loaded for inference from its directory (``spec.json`` + ``weights.safetensors``).

The same code serves evaluation and batch prediction on executors and online prediction in the driver, so
the normalizer, the class labels and the output transform are applied identically everywhere. Loading reads
JSON and safetensors only; nothing is unpickled. Executor-side: stdlib, numpy, torch, safetensors and this
package's torch modules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workers import storage
from workers.data.normalize import Normalizer
from workers.inference.answer import prediction_answer
from workers.inference.cache import ModelCache
from workers.training.torch.checkpoint import load_weights
from workers.training.torch.network import build_network, predict_transform
from workers.training.torch.spec import NetworkSpec, parse_network


@dataclass
class TorchModel:
    directory: Path
    card: dict[str, Any]
    spec: NetworkSpec
    module: torch.nn.Module
    normalizer: Normalizer | None = None

    @classmethod
    def load(cls, uri: str) -> TorchModel:
        directory = storage.fetch_dir(uri)
        if (directory / "spec.json").exists():
            card = json.loads((directory / "spec.json").read_text())
        else:  # a checkpoint: its meta.json holds the network and the model card
            meta = json.loads((directory / "meta.json").read_text())
            card = {"network": meta["network"], **meta.get("model_card", {})}
        spec = parse_network(card["network"])
        module = build_network(spec, seed=0)
        load_weights(directory, module)
        module.eval()
        normalizer = Normalizer.from_dict(card["normalizer"]) if card.get("normalizer") else None
        return cls(directory, card, spec, module, normalizer)

    @property
    def classification(self) -> bool:
        return self.spec.loss in ("cross_entropy", "binary_cross_entropy")

    @property
    def class_labels(self) -> list[Any] | None:
        labels = self.card.get("class_labels")
        return list(labels) if labels else None

    def outputs(self, x: np.ndarray, lengths: np.ndarray | None = None, batch_size: int = 1024) -> np.ndarray:
        """Predictions for rows of features (``(n, features)``, ``(n, *input_shape)`` or sequences): class
        probabilities, P(class 1) or values, as float64 numpy."""
        x = np.asarray(x, dtype=np.float32)
        if self.normalizer is not None:
            x = self.normalizer.apply(x.reshape(len(x), -1)).reshape(x.shape)
        out = []
        with torch.no_grad():  # eval mode, no grad: a forward pass only reads the module, threads may share it
            for start in range(0, len(x), batch_size):
                chunk = torch.from_numpy(np.ascontiguousarray(x[start : start + batch_size]))
                part = torch.from_numpy(lengths[start : start + batch_size]) if lengths is not None else None
                out.append(predict_transform(self.spec.loss, self.module(chunk, lengths=part)).double().numpy())
        if not out:
            width = self.spec.output_units
            return np.zeros((0, width))
        return np.concatenate(out)

    def predict(self, x: np.ndarray, lengths: np.ndarray | None = None, *, as_lists: bool = True) -> dict[str, Any]:
        """Predictions: ``class_index``, ``label`` and ``probabilities`` for classification, ``prediction`` for
        regression (a row of values per row when there are several label columns). ``as_lists=False`` keeps
        numpy arrays (for a serializer that writes them directly)."""
        out = self.outputs(x, lengths)
        return prediction_answer(out, classification=self.classification, labels=self.class_labels, as_lists=as_lists)


_WORKER_CACHE = ModelCache(4)


def cached(uri: str) -> TorchModel:
    """The model for ``uri``, loaded once per Python worker process and reused by every batch and task."""
    model: TorchModel = _WORKER_CACHE.get(uri, lambda: TorchModel.load(uri))
    return model
