"""The reader options a dataset may carry: Spark's documented options of each format, and nothing else.

Spark copies every data source option into the Hadoop configuration it resolves and reads the path with
(``newHadoopConfWithOptions``): ``fs.defaultFS`` with a ViewFS mount table mounted the checked directory onto any
other one the driver could read, ``fs.<scheme>.impl`` picks the class Hadoop loads, and an ``s3a`` endpoint or an
``hdfs://`` default file system sends the read to any host. So options are an allow-list: the options of
https://spark.apache.org/docs/latest/sql-data-sources-{csv,json,parquet,generic-options}.html, matched in any case
as Spark matches them (a case-insensitive map), each of them a value Spark reads, never a Hadoop setting.

Checked twice: when a request or a dataset is validated (app/schemas/reader_options.py takes these names from here),
and when a job reads its data (:func:`workers.data.spec.read_dataframe`), for the plans stored before the check
existed (a job queued by an earlier release runs the options its row carries).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

_FILES = ("pathGlobFilter", "recursiveFileLookup", "modifiedBefore", "modifiedAfter", "ignoreCorruptFiles",
          "ignoreMissingFiles")  # fmt: skip
"""Generic file source options: which files below the uri are read (never files elsewhere)."""
_TEXT = ("encoding", "charset", "lineSep", "mode", "columnNameOfCorruptRecord", "multiLine", "dateFormat",
         "timestampFormat", "timestampNTZFormat", "enableDateTimeParsingFallback", "samplingRatio", "locale",
         "timeZone", "compression", "codec")  # fmt: skip
"""Options CSV and JSON share (``compression``/``codec``: the docs name a codec for compressed text)."""
TAKEN: dict[str, tuple[str, ...]] = {
    "csv": (*_FILES, *_TEXT, "sep", "delimiter", "quote", "escape", "comment", "header", "inferSchema",
            "preferDate", "enforceSchema", "ignoreLeadingWhiteSpace", "ignoreTrailingWhiteSpace", "nullValue",
            "nanValue", "positiveInf", "negativeInf", "maxColumns", "maxCharsPerColumn",
            "maxMalformedLogPerPartition", "charToEscapeQuoteEscaping", "emptyValue", "unescapedQuoteHandling"),
    "json": (*_FILES, *_TEXT, "primitivesAsString", "prefersDecimal", "allowComments", "allowUnquotedFieldNames",
             "allowSingleQuotes", "allowNumericLeadingZeros", "allowBackslashEscapingAnyCharacter",
             "allowUnquotedControlChars", "dropFieldIfAllNull", "allowNonNumericNumbers"),
    "parquet": (*_FILES, "mergeSchema", "datetimeRebaseMode", "int96RebaseMode"),
}  # fmt: skip
"""Each format's reader options, as Spark's documentation spells them."""
_LOWER = {fmt: {name.lower(): name for name in names} for fmt, names in TAKEN.items()}
_ANY = {k: v for names in _LOWER.values() for k, v in names.items()}
PATH_OPTIONS = frozenset({"path", "paths", "basepath"})
"""Options that name files: only the ``uri``, checked against the data roots, may say which files are read."""
_UNENCODABLE = re.compile(r"[\x00\ud800-\udfff]")


def problem(fmt: str | None, options: Mapping[str, object]) -> str | None:
    """What is wrong with ``options`` for data of format ``fmt`` (None: not known yet, any format's option is
    taken), in words naming the option and the options taken; None when nothing is."""
    taken = _LOWER.get(fmt or "", _ANY)
    seen: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered in PATH_OPTIONS:
            return f"{key}: the uri says which files are read, not a reader option"
        if _UNENCODABLE.search(key) or (isinstance(value, str) and _UNENCODABLE.search(value)):
            shown = json.dumps(key)
            return f"{shown}: an option's name and value may not hold a NUL character or an unpaired surrogate"
        if lowered not in taken:
            what = f"of {fmt} data" if fmt in TAKEN else "Spark takes for parquet, csv or json data"
            hint = " (a Hadoop or Spark setting, which a request may not change)" if "." in key else ""
            listed = ", ".join(sorted(set(taken.values()), key=str.lower))
            return f"{json.dumps(key)} is not a reader option {what}{hint}; the options taken: {listed}"
        if lowered in seen:
            return f"{seen[lowered]} and {key} are one option to Spark (in any case): give it once"
        seen[lowered] = key
    return None
