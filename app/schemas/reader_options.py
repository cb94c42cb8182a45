"""The reader options a dataset may carry: Spark's documented options of each format, and nothing else (a Hadoop
setting such as ``fs.defaultFS`` reads any file the driver can). The list and its check are
:mod:`workers.data.reader_options`'s, where the job's reader checks them too (a job stored before the check existed);
here for the request schemas and the dataset services.
"""

from __future__ import annotations

from workers.data.reader_options import PATH_OPTIONS, TAKEN, problem

__all__ = ["PATH_OPTIONS", "TAKEN", "problem"]
