"""xgboost's integer class labels against ``dataset.num_classes``, when the request is planned (as Spark ML's): a count
that is not the one the labels name (the largest + 1) is a 422 naming ``num_classes`` and what the data holds. It
was a warning when more classes were given (the model learned classes no row has) and nothing when fewer were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.train import TrainRequest
from app.services.datasets.deferred import request_without_spark
from app.services.planning.training import plan_training


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    rows = pd.DataFrame({"a": rng.normal(size=60), "b": rng.normal(size=60), "label": np.arange(60) % 3})
    rows.assign(label=rows["label"].astype("int32")).to_parquet(tmp_path / "ints.parquet")
    rows.assign(label=rows["label"].astype("float64")).to_parquet(tmp_path / "floats.parquet")  # 0.0, 1.0, 2.0
    return tmp_path


def _plan(spark: Any, data: Path, uri: str, num_classes: int | None) -> Any:
    body = {"name": "m", "framework": "xgboost", "params": {"num_round": 2},
            "dataset": {"uri": uri, "features": ["a", "b"], "label": "label", "task": "classification",
                        "num_classes": num_classes}}  # fmt: skip
    with request_without_spark():  # as in POST /train: local data needs no Spark job
        return plan_training(request=TrainRequest.model_validate(body), settings=Settings(data_roots=[data]),
                             spark=spark)  # fmt: skip


@pytest.mark.parametrize("uri", ["ints.parquet", "floats.parquet"])
@pytest.mark.parametrize("num_classes", [2, 5])
def test_num_classes_other_than_the_labels_name_is_a_422(spark: Any, data: Path, uri: str, num_classes: int) -> None:
    with pytest.raises(ValidationFailed) as refused:
        _plan(spark, data, uri, num_classes)
    assert [e["loc"] for e in refused.value.errors or []] == ["dataset.num_classes"]
    assert refused.value.detail == (f"dataset.num_classes: 'label' has labels 0..2, 3 classes, not {num_classes}: "
                                    "leave dataset.num_classes out, or number the classes 0..k-1")  # fmt: skip


@pytest.mark.parametrize("num_classes", [3, None])
def test_the_labels_count_or_none_plans(spark: Any, data: Path, num_classes: int | None) -> None:
    plan = _plan(spark, data, "ints.parquet", num_classes)
    assert plan.train.num_classes == 3 and plan.spec.objective == "multi:softprob" and not plan.warnings
