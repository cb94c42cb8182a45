"""Run inside the MLflow test environment (tests/mlflow_env.py), which has MLflow and the models' requirements but
not sparktrain: load each exported model directory with ``mlflow.pyfunc.load_model`` and predict.

``python mlflow_side.py JOBS.json OUT.json``: JOBS is a list of ``{"dir", "columns", "data"}`` (a DataFrame in
split form) or ``{"dir", "tensor"}`` (a float32 array); OUT gets, per job, ``{"columns": {name: [...]}}`` for a
DataFrame answer or ``{"values": [...]}`` for an array or a list, and the loaded signature's inputs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pandas as pd


def _plain(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def main(jobs_path: str, out_path: str) -> None:
    jobs = json.loads(Path(jobs_path).read_text())
    answers = []
    for job in jobs:
        model = mlflow.pyfunc.load_model(job["dir"])
        if "tensor" in job:
            data = np.asarray(job["tensor"], dtype=np.float32)
        else:
            data = pd.DataFrame(job["data"], columns=job["columns"])
            for column in data.columns:
                if data[column].map(lambda v: isinstance(v, list)).all():
                    data[column] = data[column].map(lambda v: np.asarray(v, dtype=np.float64))
        out = model.predict(data)
        if isinstance(out, pd.DataFrame):
            answer = {"columns": {c: [_plain(v) for v in out[c]] for c in out.columns}}
        else:
            answer = {"values": np.asarray(out).tolist()}
        answer["signature_inputs"] = model.metadata.signature.inputs.to_dict()
        answers.append(answer)
    Path(out_path).write_text(json.dumps(answers))
    assert "sparktrain" not in sys.modules and "workers" not in sys.modules and "app" not in sys.modules


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
