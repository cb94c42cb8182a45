"""A job the CLI queued or waits for: following it (a live progress bar, or nothing with --json), Ctrl-C while it
runs, and how its end is reported (on stdout, its reason on stderr) and turned into the exit code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from sparktrain._app import Options, err, out, print_json
from sparktrain._exits import FAILED, OK, OUTCOME
from sparktrain._progress import Live
from sparktrain.client import Client
from sparktrain.errors import Interrupted, Unreachable


@contextmanager
def following(job_id: str, again: str = "logs -f") -> Iterator[None]:
    """Ctrl-C, or the service lost while following a job: say that the job goes on and how to follow it again
    (``sparktrain {again} JOB``)."""
    again = f"follow it again with: sparktrain {again} {job_id}"
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: job {job_id} goes on in the service; {again}") from None
    except Unreachable as exc:
        raise Unreachable(f"{exc}; job {job_id} goes on where the service runs: {again}") from None


def ended(opts: Options, final: dict[str, Any], to: Console = out) -> int:
    """Report a finished job: as JSON with --json (a job that did not succeed also says why on stderr), else as
    :func:`report` does; its exit code."""
    if not opts.json:
        return report(final, to)
    print_json(final)
    if final["status"] != "SUCCEEDED":  # the exit code's reason, on stderr as without --json
        error = final.get("error") or {}
        err.print(f"{final['status']} job {final['id']}: {error.get('reason')}: {error.get('message')}")
    return OUTCOME.get(final["status"], FAILED)


def follow(opts: Options, api: Client, job: dict[str, Any], to: Console) -> int:
    """Wait for the job with a live progress bar (none with --json); report how it ended (on ``to``); its exit
    code."""
    with following(job["id"]):
        final = api.wait(job["id"]) if opts.json else Live(err).follow(api, job)
    return ended(opts, final, to)


def warned(job: dict[str, Any]) -> None:
    """The job's warnings (the request's and the run's), on stderr."""
    for warning in job.get("warnings") or ():
        err.print(f"warning: {warning}", highlight=False, soft_wrap=True)


def report(job: dict[str, Any], to: Console) -> int:
    warned(job)
    status = job["status"]
    if status == "SUCCEEDED":
        to.print(f"SUCCEEDED job {job['id']}", highlight=False)
        if job.get("model"):
            to.print(f"model {job['model'].get('name')} version {job['model'].get('version')}", highlight=False)
        result = job.get("result") or {}
        validation = result.get("validation") if isinstance(result, dict) else None
        if isinstance(validation, dict):
            shown = ", ".join(f"{k} {v:.4g}" for k, v in validation.items() if isinstance(v, int | float))
            to.print(f"validation: {shown}", highlight=False)
        if isinstance(result, dict) and isinstance(result.get("best"), dict):  # a tune: its best trial
            to.print(best_trial(result), highlight=False)
        if isinstance(result, dict) and result.get("output_uri"):  # a batch prediction's parquet output
            counts = [f"{result['rows']} rows"] if isinstance(result.get("rows"), int) else []
            if result.get("bad_rows"):
                counts.append(f"{result['bad_rows']} bad rows dropped")
            to.print(f"output {result['output_uri']}" + (f" ({', '.join(counts)})" if counts else ""), highlight=False)
        return OK
    error = job.get("error") or {}
    err.print(f"{status} job {job['id']}: {error.get('reason', '?')}: {error.get('message', '')}", highlight=False)
    return OUTCOME.get(status, FAILED)


def best_trial(result: dict[str, Any]) -> str:
    """A tune's best trial on one line: ``best: accuracy 0.9694 (trial 5 of 20: learning_rate 0.0133, units 80)``."""
    best = result["best"]
    metric = best.get("metric")
    value = f"{metric:.4g}" if isinstance(metric, int | float) and not isinstance(metric, bool) else str(metric)
    params = best.get("params") if isinstance(best.get("params"), dict) else {}
    shown = ", ".join(f"{name} {_value(v)}" for name, v in params.items())
    of = f" of {result['trials']}" if isinstance(result.get("trials"), int) else ""
    return (
        f"best: {result.get('metric', 'metric')} {value} (trial {best.get('trial')}{of}{': ' if shown else ''}{shown})"
    )


def _value(value: Any) -> str:
    """A parameter's value as the line shows it: a number to 4 significant digits, anything else as compact JSON."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def submitted(opts: Options, api: Client, job: dict[str, Any], wait: bool, to: Console = out) -> int:
    """Say what was queued; with ``wait``, follow it (its end reported on ``to``); the exit code."""
    if not wait:
        if opts.json:
            print_json(job)
        else:
            out.print(f"{job['status']} job {job['id']}  (follow it: sparktrain logs -f {job['id']})", highlight=False)
            warned(job)
        return OK
    if not opts.json:
        err.print(f"job {job['id']} queued; following it (Ctrl-C stops following, not the job)", highlight=False)
    return follow(opts, api, job, to)
