"""A batch prediction's output appears at its path only as the job's last step, with the rows counted before,
on a real SparkSession: a job cancelled or failed before it leaves no output there (workers/inference/batch.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from workers.context import JobFailure
from workers.inference.batch import MARKER, _write


class Ctx:
    """The job context the write reports through; ``stop_at`` makes a progress report raise, as a cancel does."""

    def __init__(self, spark: Any, stop_at: float | None = None) -> None:
        self.job_id, self.attempt, self.spark, self.stop_at = "a" * 32, 1, spark, stop_at
        self.reported: list[float] = []
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def check_cancelled(self) -> None:
        pass

    def progress(self, fraction: float, message: str | None = None) -> None:
        if fraction == self.stop_at:
            raise JobFailure("CANCELLED", "cancelled while it wrote")
        self.reported.append(fraction)


def _predictions(spark: Any) -> Any:
    return spark.range(0, 25, numPartitions=3).selectExpr("id AS key", "CAST(id * 2 AS DOUBLE) AS prediction")


def test_the_rows_are_counted_and_the_output_published_last(spark: Any, tmp_path: Path) -> None:
    final = tmp_path / "out"
    outcome = _write(Ctx(spark), SimpleNamespace(output_path=str(final), key="key"), _predictions(spark), 2)  # type: ignore[arg-type]
    assert outcome.result == {"output_uri": str(final), "rows": 25, "bad_rows": 2, "repeated_keys": 0}
    assert (final / MARKER).read_text() == "a" * 32 and spark.read.parquet(str(final)).count() == 25
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no private directory left


def test_a_job_stopped_before_the_end_leaves_nothing_at_the_output_path(spark: Any, tmp_path: Path) -> None:
    final = tmp_path / "out"
    with pytest.raises(JobFailure):
        _write(Ctx(spark, stop_at=1.0), SimpleNamespace(output_path=str(final), key="key"), _predictions(spark), 0)  # type: ignore[arg-type]
    assert not final.exists()  # it was renamed into place before the count, then the job ended CANCELLED


def test_a_key_that_repeats_is_counted_and_said(spark: Any, tmp_path: Path) -> None:
    """A batch keyed by a column that does not tell the rows apart (the taxi data's ``hour``) was accepted without a
    word, and its predictions could not be joined back to their rows."""
    ctx, final = Ctx(spark), tmp_path / "out"
    hours = spark.range(0, 25, numPartitions=3).selectExpr("id % 5 AS hour", "CAST(id AS DOUBLE) AS prediction")
    outcome = _write(ctx, SimpleNamespace(output_path=str(final), key="hour"), hours, 0)  # type: ignore[arg-type]
    assert outcome.result is not None and outcome.result["repeated_keys"] == 20
    assert ctx.warnings == [
        "the key 'hour' is not unique: 20 of the 25 output rows repeat the key of an earlier row, so the predictions "
        "cannot be joined back to their rows by it; key a batch by a column that tells the rows apart (an id)"
    ]


def test_an_empty_output_is_written_and_its_keys_need_no_check(spark: Any, tmp_path: Path) -> None:
    """Spark writes a part file for no rows, whose key column reads back typed null: counting its keys failed the
    job at its end (review)."""
    final = tmp_path / "out"
    none = _predictions(spark).where("key < 0")
    outcome = _write(Ctx(spark), SimpleNamespace(output_path=str(final), key="key"), none, 3)  # type: ignore[arg-type]
    assert outcome.result == {"output_uri": str(final), "rows": 0, "bad_rows": 3, "repeated_keys": 0}


def test_a_key_pyarrow_cannot_count_is_not_checked_and_the_output_is_published(spark: Any, tmp_path: Path) -> None:
    final = tmp_path / "out"
    structs = spark.range(0, 5).selectExpr("named_struct('a', id) AS key", "CAST(id AS DOUBLE) AS prediction")
    outcome = _write(Ctx(spark), SimpleNamespace(output_path=str(final), key="key"), structs, 0)  # type: ignore[arg-type]
    assert outcome.result is not None and (outcome.result["rows"], outcome.result["repeated_keys"]) == (5, None)
    assert (final / MARKER).exists()


@pytest.mark.parametrize(
    ("framework", "files", "says"),
    [("torch", [], "is gone (removed or moved since it was registered; it needs spec.json, weights.safetensors)"),
     ("torch", ["spec.json", "MLmodel"], "has no weights.safetensors (removed"),
     ("xgboost", ["card.json"], "has no model.json (removed"),
     ("spark_ml", ["metadata"], "has no stages (removed")],
)  # fmt: skip
def test_a_model_whose_files_are_gone_fails_before_spark_runs(
    spark: Any, tmp_path: Path, framework: str, files: list[str], says: str
) -> None:
    """A version whose artifact directory was removed failed as SPARK_ERROR with a traceback of load_model from the
    executors; the driver now looks first and names what is missing."""
    from workers.data.spec import ResolvedDataset
    from workers.inference.batch import predict
    from workers.inference.spec import ModelRef, PredictionPlan

    directory = tmp_path / "model"
    for name in files:
        directory.mkdir(exist_ok=True)
        (directory / name).write_text("{}")
    model = ModelRef(framework=framework, uri=str(directory), card={"features": ["x"]}, name="taxi", version=3)
    ds = ResolvedDataset(path=str(tmp_path / "no-data"), format="parquet", features=("x",), label=None, task=None)
    ctx = Ctx(spark)
    with pytest.raises(JobFailure) as failed:
        predict(ctx, PredictionPlan(model=model, dataset=ds, key="id", output_path=str(tmp_path / "out")))  # type: ignore[arg-type]
    assert failed.value.reason == "MODEL_FILES_MISSING" and ctx.reported == [], failed.value
    assert failed.value.message.startswith(f"the files of taxi version 3 are missing: {directory} {says}")
    assert failed.value.message.endswith("predict with another version, or train it again")


class _Racing(Ctx):
    """Another writer publishes its own output at the path just before this job's last step (the rows are counted,
    the publish is next): two predictions to one path that both got past every earlier check."""

    def __init__(self, spark: Any, final: Path, writer: str) -> None:
        super().__init__(spark)
        self.final, self.writer = final, writer

    def progress(self, fraction: float, message: str | None = None) -> None:
        if fraction == 1.0:
            self.final.mkdir()
            (self.final / "part-0.parquet").write_bytes(b"theirs")
            (self.final / MARKER).write_text(self.writer)
        super().progress(fraction, message)


def test_an_output_that_appears_before_the_publish_is_never_replaced(spark: Any, tmp_path: Path) -> None:
    """The job checked the path when it started to write, then replaced (and deleted) whatever was there when it
    published: another owner's finished output was gone, and that owner's job still said SUCCEEDED (walkthrough F2)."""
    final = tmp_path / "out"
    with pytest.raises(JobFailure) as failed:
        _write(
            _Racing(spark, final, "b" * 32), SimpleNamespace(output_path=str(final), key="key"), _predictions(spark), 0
        )  # type: ignore[arg-type]
    assert failed.value.reason == "OUTPUT_EXISTS", failed.value
    assert (final / MARKER).read_text() == "b" * 32 and (final / "part-0.parquet").read_bytes() == b"theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # this job's private directory removed, nothing aside


def test_an_earlier_attempts_own_output_is_replaced(spark: Any, tmp_path: Path) -> None:
    """An attempt that died after its rename left the job's own output: the next attempt replaces it."""
    final = tmp_path / "out"
    ctx = _Racing(spark, final, "a" * 32)  # this job's id: an earlier attempt's output
    outcome = _write(ctx, SimpleNamespace(output_path=str(final), key="key"), _predictions(spark), 0)  # type: ignore[arg-type]
    assert outcome.result is not None and outcome.result["rows"] == 25
    assert not (final / "part-0.parquet").exists() and spark.read.parquet(str(final)).count() == 25
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_empty_directory_at_the_path_is_not_replaced(spark: Any, tmp_path: Path) -> None:
    """rename(2) replaces an empty directory without a word; the publish does not (renameat2 RENAME_NOREPLACE)."""
    from workers.inference.batch import _RENAMEAT2, _rename_new

    if _RENAMEAT2 is None:
        pytest.skip("no renameat2 in this C library: rename(2) is all there is")

    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    target.mkdir()
    assert not _rename_new(source, target) and source.is_dir() and target.is_dir()
    target.rmdir()
    assert _rename_new(source, target) and target.is_dir() and not source.exists()
