"""A request's dataset reference, checked against the data: the URI (or a registered dataset's id) resolves
inside the data roots, Spark reads the schema, and every column the request names exists with a usable type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.train import DatasetRef
from app.services.datasets import footers, paths, registry
from app.services.datasets.numbers import Numbers, count_numbers, shown
from app.services.datasets.schema import (
    NUMERIC_TYPES,
    is_numeric_array,
    local_text,
    parquet_rows,
    read_schema,
    reader_options,
)
from app.services.datasets.summary import files_bytes, text_summary
from workers.data.spec import ResolvedDataset
from workers.inference.sequences import PLACEHOLDER_LABEL

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CATEGORY_TYPES = frozenset({"string", "boolean", "tinyint", "smallint", "int", "bigint"})
"""Spark types a categorical column may have (its values compared as text)."""
PARSED_FORMATS = ("csv", "json")
"""Formats whose column types are inferred from the text: a declared numeric column of them is parsed row by row."""


def locate(
    uri: str, fmt: Any, options: dict[str, str], *, settings: Settings, db: sessionmaker[Session] | None, loc: str
) -> tuple[str, Any, dict[str, str]]:
    """(path, format, reader options) of a request's dataset: a registered dataset's id, or a URI."""
    if db is not None:
        with db() as session:
            row = registry.registered(session, uri)
            if row is not None:
                merged = {**row.options, **options}
                return row.resolved_uri, row.format, paths.check_options(row.format, merged, loc=_options_loc(loc))
    path = paths.resolve_uri(uri, roots=settings.data_roots, remote_prefixes=settings.remote_uri_prefixes, loc=loc)
    fmt = paths.detect_format(path, fmt, loc=loc.replace(".uri", ".format"))
    return path, fmt, reader_options(fmt, paths.check_options(fmt, options, loc=_options_loc(loc)))


def _options_loc(loc: str) -> str:
    """``dataset.options`` for ``dataset.uri``; a ``sequence.labels_uri`` takes no options but a registered
    dataset's, which are its own."""
    return loc.removesuffix("uri") + "options" if loc == "uri" or loc.endswith(".uri") else loc


def _numeric(dtype: str, parsed: bool) -> bool:
    """Whether a column of this type can be read as numbers. A string column of a ``parsed`` dataset can (a CSV or
    JSON file, not a sequence dataset): schema inference makes a numeric column with one unparseable token (``n/a``)
    a string column, and the job parses each value, a token that is not a number being a bad row
    (workers/data/clean.py)."""
    return dtype in NUMERIC_TYPES or (dtype == "string" and parsed)


def readable_name(column: str, where: str, *, listed: bool = True) -> None:
    """A 422 for a column whose name Spark reads as a path: ``Sepal.Length`` (R's iris) is the field ``Length`` of
    a struct ``Sepal`` wherever a job names it, and the job failed with Spark's ``UNRESOLVED_COLUMN``. ``listed``:
    the request named it (else it was taken by default, and leaving it out is the other fix)."""
    if "." in column or "`" in column:
        other = "" if listed else ", or list dataset.features without it"
        raise ValidationFailed.at(where, f"{column!r}: Spark reads '.' in a column name as a field of a struct, so "
                                  f"jobs cannot name this column; rename it in the data (e.g. "
                                  f"{column.replace('.', '_').replace('`', '')!r}){other}")  # fmt: skip


def _string_columns(ref: DatasetRef, schema: dict[str, str], labels: list[str]) -> list[str]:
    """The string columns of a CSV / JSON file whose values the request may read as numbers: the declared numeric
    ones (features, a regression's labels, the weight) and, when the features are left to their default, any."""
    declared = {
        *(ref.features or ()),
        *(labels if ref.task == "regression" else ()),
        *([ref.weight] if ref.weight else []),
    }
    keys = {ref.sequence.sequence_id, ref.sequence.step} if ref.sequence is not None else set()
    others = set() if ref.features is not None else set(schema) - {*labels, *keys}
    categorical = set(ref.categorical or ())
    return [c for c, t in schema.items() if t == "string" and c not in categorical and c in declared | others]


def _default_features(
    ref: DatasetRef, schema: dict[str, str], taken: set[str], numbers: dict[str, Numbers], warnings: list[str]
) -> list[str]:
    """The numeric columns but those ``taken``, and (not for sequences) the string columns whose values are numbers
    but a few tokens (``n/a``), which the job reads as numbers, each such token a bad row; what is taken so, or left
    out of a sequence's features, is said in ``warnings``."""
    features = []
    for column, dtype in schema.items():
        counted = numbers.get(column)
        if column in taken:
            continue
        if counted is not None and counted.values and not counted.mostly and not counted.none and ref.sequence is None:
            warnings.append(f"dataset.features: {column!r} is left out of the default features: "
                            f"{_some(counted)}{_null_hint(counted.first)}; list it in dataset.features to train on "
                            "it, each such row a bad row")  # fmt: skip
        if not (dtype in NUMERIC_TYPES or (counted is not None and counted.mostly)):
            continue
        if counted is not None and not counted.not_numbers:
            warnings.append(f"dataset.features: {column!r} is a default feature read as numbers: its "
                            f"{counted.values} values are numbers written as text")  # fmt: skip
        elif counted is not None:
            if ref.sequence is not None:
                warnings.append(f"dataset.features: {column!r} is left out: {_some(counted)}, and a sequence's "
                                "features must all be numbers")  # fmt: skip
                continue
            warnings.append(f"dataset.features: {column!r} is a default feature read as numbers, although "
                            f"{_some(counted)}: each such row is a bad row (list dataset.features to leave it "
                            "out)")  # fmt: skip
        features.append(column)
    return features


def _some(counted: Numbers) -> str:
    return f"{counted.not_numbers} of its {counted.values} values are not numbers{shown(counted.first)}"


_MISSING = frozenset({"NA", "N/A", "n/a", "na", "NULL", "null", "None", "-", "?", "."})
"""Tokens that usually mark a missing value (R writes ``NA``)."""


def _null_hint(token: str | None) -> str:
    """How to read a missing-value token (R's ``NA``) as null rather than as text."""
    if token is None or token.strip() not in _MISSING:
        return ""
    return f" (if {token.strip()!r} marks a missing value, set options.nullValue: {token.strip()!r})"


def columns_words(schema: dict[str, str]) -> str:
    """The columns of a dataset for a message: a name with blanks at either end quoted (``' b'`` of a header
    written ``a, b``); a single column whose name holds a separator says that ``options.sep`` is the fix."""
    listed = ", ".join(f"{c!r} ({t})" if c != c.strip() or not c else f"{c} ({t})" for c, t in schema.items())
    if len(schema) == 1:
        name = next(iter(schema))
        sep = next((s for s in (";", "\t", "|") if s in name), None)
        if sep is not None:
            shown_sep = "\\t" if sep == "\t" else sep
            listed += (f"; one column whose name holds {sep!r}: the file is likely separated by it, set "
                       f'options.sep: "{shown_sep}"')  # fmt: skip
    return listed


def _features(
    ref: DatasetRef,
    schema: dict[str, str],
    labels: list[str],
    loc: str,
    allow_array: bool,
    parsed: bool,
    numbers: dict[str, Numbers],
    warnings: list[str],
    left_out: set[str],
) -> list[str]:
    """The features: those listed, or by default the numeric columns but the label, weight, sequence keys and
    ``left_out`` (a pandas index stored in parquet, which may still be listed)."""
    available = columns_words(schema)
    taken = {*labels, *([ref.weight] if ref.weight else []), *left_out}
    if ref.sequence is not None:
        taken |= {ref.sequence.sequence_id, ref.sequence.step}
    if ref.features is None:
        features = _default_features(ref, schema, taken, numbers, warnings)
        arrays = [c for c, t in schema.items() if c not in taken and is_numeric_array(t)]
        if not features and allow_array and len(arrays) == 1:
            features = arrays
        if not features and not ref.categorical:
            raise ValidationFailed.at(f"{loc}.features", f"{ref.uri} has no numeric columns; columns: {available}")
        if not ref.categorical:
            for column in features:
                readable_name(column, f"{loc}.features", listed=False)
            return features
        wanted = set(features) | set(ref.categorical)  # in the file's order; checked below, as listed ones are
        features = [c for c in schema if c in wanted] + [c for c in ref.categorical if c not in schema]
    else:
        features = list(ref.features)
    text: dict[str, str] = {}  # where -> a feature of text, none of its values a number
    for i, column in enumerate(features):
        where = f"{loc}.features[{i}]"
        if column not in schema:
            raise ValidationFailed.at(where, f"no column {column!r} in {ref.uri}; columns: {available}")
        readable_name(column, where if ref.features is not None else f"{loc}.features",
                      listed=ref.features is not None or column in (ref.categorical or ()))  # fmt: skip
        if column in labels:
            raise ValidationFailed.at(where, f"{column!r} is the label; it cannot be a feature")
        if column == ref.weight:
            raise ValidationFailed.at(where, f"{column!r} is the weight column; it cannot be a feature")
        dtype = schema[column]
        if column in (ref.categorical or ()) and dtype not in CATEGORY_TYPES:
            at = f"{loc}.categorical[{list(ref.categorical or ()).index(column)}]"
            raise ValidationFailed.at(at, f"{column!r} is {dtype}; a categorical column holds text, whole numbers or "
                                      "booleans")  # fmt: skip
        if is_numeric_array(dtype):
            if not allow_array:
                raise ValidationFailed.at(where, f"{column!r} is {dtype}; this framework needs numeric columns")
            if len(features) > 1:
                raise ValidationFailed.at(
                    f"{loc}.features", "an array column must be the only feature (with dataset.input_shape)"
                )
        elif column in (ref.categorical or ()):
            continue
        elif ref.sequence is not None and column in numbers:
            counted = numbers[column]
            raise ValidationFailed.at(where, f"{column!r} is string: {counted.not_numbers} of its {counted.values} "
                                      f"values are not numbers{shown(counted.first)}; a sequence's features must "
                                      "all be numbers (the job does not parse them): write them as numbers, or "
                                      "leave the column out")  # fmt: skip
        elif not _numeric(dtype, parsed):
            hint = _TEXT_FEATURE if dtype == "string" else ""
            raise ValidationFailed.at(where, f"{column!r} is {dtype}; features must be numeric{hint}")
        elif column in numbers and numbers[column].none:
            text.setdefault(where, column)
    if len(set(features)) != len(features):
        raise ValidationFailed.at(f"{loc}.features", "a column is listed twice")
    for i, column in enumerate(ref.categorical or ()):
        if column not in features:
            raise ValidationFailed.at(f"{loc}.categorical[{i}]", f"{column!r} is not one of {loc}.features")
    if ref.categorical and len(set(ref.categorical)) != len(ref.categorical):
        raise ValidationFailed.at(f"{loc}.categorical", "a column is listed twice")
    if text:  # (after the categorical columns: one of those may be the column meant)
        where, column = next(iter(text.items()))
        raise ValidationFailed.at(where, f"{column!r} is {_text(numbers[column])}; features must be "
                                  f"numeric{_TEXT_FEATURE}")  # fmt: skip
    return features


def resolve_dataset(
    ref: DatasetRef,
    *,
    settings: Settings,
    spark: SparkSession,
    loc: str = "dataset",
    allow_array: bool = False,
    db: sessionmaker[Session] | None = None,
    labelled: bool = True,
    parse_numbers: bool = False,
    warnings: list[str] | None = None,
) -> tuple[ResolvedDataset, dict[str, str]]:
    """Resolve the URI (or registered dataset id), read the schema with Spark and check the columns the request
    names. Returns the dataset and its schema (column -> Spark type). ``allow_array`` accepts one numeric array
    column as the only feature (images, embeddings); ``labelled=False``: a sequence dataset without labels (for
    prediction); ``parse_numbers``: a string column of a CSV / JSON file may be a declared numeric column (a
    training job parses it, see :func:`_numeric`), and is a default feature when its values are numbers but a few
    tokens; one whose values are no numbers at all is a 422, as in parquet. ``warnings``: what the caller should
    tell the request (a string column taken as a default feature) is appended to it."""
    path, fmt, options = locate(ref.uri, ref.format, ref.options, settings=settings, db=db, loc=f"{loc}.uri")
    schema = read_schema(spark, path, fmt, options, loc=f"{loc}.uri")
    _check_rows(path, fmt, options, loc=f"{loc}.uri")
    available = columns_words(schema)
    parsed = parse_numbers and fmt in PARSED_FORMATS and ref.sequence is None
    labels = [] if ref.label is None else [ref.label] if isinstance(ref.label, str) else list(ref.label)
    strings = _string_columns(ref, schema, labels) if parse_numbers and fmt in PARSED_FORMATS else []
    numbers = count_numbers(spark, path, fmt, options, strings)
    if len(labels) > 1 and ref.task != "regression":
        raise ValidationFailed.at(f"{loc}.label", "several label columns are a regression's; use task regression")
    separate_labels = ref.sequence is not None and ref.sequence.labels_uri is not None
    for column in labels:
        if separate_labels:
            continue  # checked against the label dataset
        if column not in schema:
            raise ValidationFailed.at(f"{loc}.label", f"no column {column!r} in {ref.uri}; columns: {available}")
        readable_name(column, f"{loc}.label")
        if ref.task == "regression" and not _numeric(schema[column], parsed):
            dtype = schema[column]
            raise ValidationFailed.at(f"{loc}.label", f"{column!r} is {dtype}; a regression label must be numeric")
        if ref.task == "regression" and parsed and column in numbers and numbers[column].none:
            raise ValidationFailed.at(f"{loc}.label", f"{column!r} is {_text(numbers[column])}; a regression label "
                                      "must be numeric (when training on classes, set dataset.task to "
                                      "classification)")  # fmt: skip
    if ref.weight is not None:
        if ref.weight not in schema:
            raise ValidationFailed.at(f"{loc}.weight", f"no column {ref.weight!r} in {ref.uri}; columns: {available}")
        readable_name(ref.weight, f"{loc}.weight")
        if not _numeric(schema[ref.weight], parsed):
            raise ValidationFailed.at(f"{loc}.weight", f"{ref.weight!r} is {schema[ref.weight]}; weights are numbers")
        if parsed and ref.weight in numbers and numbers[ref.weight].none:
            raise ValidationFailed.at(f"{loc}.weight", f"{ref.weight!r} is {_text(numbers[ref.weight])}; weights "
                                      "are numbers")  # fmt: skip
    sequence, labels_path = _sequence(
        ref, schema, labels, settings=settings, spark=spark, db=db, loc=loc, labelled=labelled
    )
    index = footers.pandas_index(local[0]) if fmt == "parquet" and (local := local_text(path, {})) else set()
    features = _features(
        ref, schema, labels, loc, allow_array, parsed, numbers, [] if warnings is None else warnings, index
    )
    if sequence is not None:
        sequence["features"] = features
    resolved = ResolvedDataset(
        path=path,
        format=fmt,
        features=tuple(features),
        label=labels[0] if labels else None,
        extra_labels=tuple(labels[1:]),
        task=ref.task,
        num_classes=ref.num_classes,
        bad_rows=ref.bad_rows,
        options=options,
        weight=ref.weight,
        normalize=ref.normalize,
        validation_fraction=ref.split.validation_fraction if ref.split else None,
        split_seed=ref.split.seed if ref.split else 7,
        sequence=sequence,
        labels_path=labels_path,
        categorical=tuple(ref.categorical or ()),
        column_types={
            f: "double" if schema[f] == "string" and f not in (ref.categorical or ()) else schema[f]
            for f in features
            if f in schema
        },
    )
    return resolved, schema


def _sequence(
    ref: DatasetRef,
    schema: dict[str, str],
    labels: list[str],
    *,
    settings: Settings,
    spark: SparkSession,
    db: sessionmaker[Session] | None,
    loc: str,
    labelled: bool = True,
) -> tuple[dict[str, Any] | None, str | None]:
    """The SequenceSpec (as a dict, features filled in by the caller) and the separate label data's path."""
    seq = ref.sequence
    if seq is None:
        return None, None
    if labelled and len(labels) != 1:
        raise ValidationFailed.at(f"{loc}.label", "a sequence dataset has one label column")
    if not labelled:
        labels, seq = [PLACEHOLDER_LABEL], seq.model_copy(update={"labels_uri": None})
    keys = [seq.sequence_id] + ([seq.step] if seq.layout == "rows" else [])
    for column in keys:
        if column not in schema:
            raise ValidationFailed.at(f"{loc}.sequence", f"no column {column!r} in {ref.uri}; name it in sequence")
    labels_path = None
    if seq.labels_uri is not None:
        labels_path, fmt, options = locate(
            seq.labels_uri, None, {}, settings=settings, db=db, loc=f"{loc}.sequence.labels_uri"
        )
        label_schema = read_schema(spark, labels_path, fmt, options, loc=f"{loc}.sequence.labels_uri")
        for column in [*keys, labels[0]]:
            if column not in label_schema:
                raise ValidationFailed.at(
                    f"{loc}.sequence.labels_uri", f"no column {column!r} in {seq.labels_uri}; it needs {keys + labels}"
                )
    spec = {
        "label": labels[0],
        "layout": seq.layout,
        "labels": seq.labels,
        "task": ref.task or "classification",
        "num_classes": ref.num_classes,
        "alignment": seq.alignment,
        "max_length": seq.max_length,
        "sequence_id": seq.sequence_id,
        "step": seq.step,
    }
    return spec, labels_path


_SMALL = 64 << 10
"""Local CSV / JSON-lines data up to this size is read whole when a request is checked, for whether it has rows."""


def _check_rows(path: str, fmt: str, options: dict[str, str], *, loc: str) -> None:
    """A 422 for data known to have no rows (a CSV of only its header, parquet of no rows), rather than a job that
    fails late or for another reason (a label of 0 classes, no numeric column). Known: local parquet's footers, or
    small local text read whole, now (a registration's summary may be older than the data: rows added since)."""
    rows: int | None = None
    found = local_text(path, options) if fmt in ("csv", "json") else None
    if fmt == "parquet":
        rows = parquet_rows(path, fmt, options, enough=1)
    elif found is not None and not found[1] and files_bytes(found[0]) <= _SMALL:
        summary = text_summary(found[0], fmt, options, sample_rows=0)
        rows = summary[1] if summary is not None and not summary[3] else None
    if rows == 0:
        header = fmt == "csv" and str(options.get("header", "false")).lower() == "true"
        named = path.rstrip("/").rsplit("/", 1)[-1]  # (a registered dataset's id names no file)
        raise ValidationFailed.at(loc, f"{named} has no rows{' (only its header)' if header else ''}; add rows, or "
                                  "name data that has some")  # fmt: skip


def _text(counted: Numbers) -> str:
    """A string column none of whose values is a number, in words."""
    return f"string and none of its {counted.values} values is a number{shown(counted.first)}"


_TEXT_FEATURE = (
    "; write numbers as numbers, name a text category in dataset.categorical when training (one 0/1 column per "
    "value), or leave it out"
)
