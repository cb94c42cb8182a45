"""A version read shows the model's signature once: ``GET /models`` gave every version's signature twice, as
``signature`` and again as ``params.signature`` (the same object), which made the list of two models with two
versions each some 10 KB. A model with categorical features keeps its recorded MLflow signature (of the one-hot
columns) in ``params``, where it differs from the ``signature`` requests are checked against."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.helpers import Service, running_service, taxi_request

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    base = tmp_path_factory.mktemp("reads")
    data = base / "data"
    data.mkdir()
    rng = np.random.default_rng(2)
    city = rng.choice(["north", "south"], size=200)
    distance = rng.uniform(0, 10, 200)
    fare = 2 * distance + np.where(city == "north", 3.0, 0.0) + rng.normal(0, 0.1, 200)
    pd.DataFrame({"distance": distance, "city": city, "fare": fare}).to_csv(data / "fares.csv", index=False)
    with running_service(spark, base, data_roots=[REPO / "datasets", data]) as service:
        yield service


def _versions(svc: Service) -> dict[str, dict[str, Any]]:
    return {m["name"]: m["versions"][0] for m in svc.client.get("/models").json()["items"]}


def test_each_version_shows_its_signature_once(svc: Service) -> None:
    svc.done("/train", taxi_request("plain"))
    svc.done("/train", {"name": "by-city", "framework": "spark_ml", "params": {"algorithm": "linear_regression"},
                        "dataset": {"uri": "fares.csv", "features": ["distance", "city"], "label": "fare",
                                    "task": "regression", "categorical": ["city"]}})  # fmt: skip
    listed = _versions(svc)

    plain = listed["plain"]
    assert "signature" not in plain["params"], "the signature is `signature`, not repeated in params"
    assert [c["name"] for c in plain["signature"]["inputs"]][:2] == ["passenger_count", "trip_distance"]
    assert plain["params"]["input_example"] and plain["params"]["features"]  # the rest of params stays
    read = svc.client.get("/models/plain/versions/1").json()
    assert "signature" not in read["params"] and read["signature"] == plain["signature"]

    by_city = listed["by-city"]
    taken = {c["name"]: c for c in by_city["signature"]["inputs"]}
    assert taken["city"]["categorical"] is True  # what requests send: the city as text
    recorded = [c["name"] for c in by_city["params"]["signature"]["inputs"]]
    assert "city" not in recorded and len(recorded) > len(taken), "MLflow's: the one-hot columns"
