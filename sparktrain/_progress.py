"""The progress display of ``--wait``: a live line while the job runs, then one final line that names the state
in full (message and metrics are cut to the width instead) and has no spinner."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TaskProgressColumn, TextColumn
from rich.table import Column
from rich.text import Text

from sparktrain.client import Client, Event

STATE_WIDTH = 10
"""The longest state, CANCELLING."""


class _Detail(ProgressColumn):
    """The progress message and the newest metrics, cut with an ellipsis to the room the other columns leave."""

    def render(self, task: Task) -> Text:
        return _detail(task.description, task.fields.get("metrics", ""))


def _detail(message: str, metrics: str) -> Text:
    text = Text(message, no_wrap=True, overflow="ellipsis")
    if metrics:
        text.append(("  " if message else "") + metrics, style="dim")
    return text


class Live:
    """Follows a job's events into a live line: state, progress, message, and the newest metrics."""

    SHOWN = ("loss", "samples_per_s")

    def __init__(self, console: Console) -> None:
        self.console = console
        self.latest: dict[str, dict[Any, float]] = {}
        # A fixed room for the spinner, state, bar and percentage; what is left goes to the message and metrics.
        bar = max(10, min(30, console.width - 60))
        self.progress = Progress(
            SpinnerColumn(table_column=Column(no_wrap=True)),
            TextColumn("{task.fields[status]}", style="bold", markup=False, table_column=_fixed(STATE_WIDTH)),
            BarColumn(bar_width=bar, table_column=_fixed(bar)),
            TaskProgressColumn(table_column=_fixed(4)),
            _Detail(),
            console=console,
            transient=True,  # replaced by final_line once the job ends
        )
        self.task = self.progress.add_task("", total=1.0, status="", metrics="")

    def follow(self, api: Client, job: dict[str, Any]) -> dict[str, Any]:
        """Show the job until it ends, then its final line; returns the finished job."""
        self.progress.update(self.task, status=job["status"])
        try:
            # piped, the live line would only leave an empty line where it was: the final line alone
            with self.progress if self.console.is_terminal else nullcontext():
                final = api.wait(job["id"], on_event=self)
        except KeyboardInterrupt:  # following stops, the job goes on: leave the line where it was
            task = self.progress.tasks[0]
            self.console.print(self._line(task.fields["status"], task.completed, task.description))
            raise
        self.console.print(self._line(final["status"], final.get("progress"), final.get("progress_message")))
        return final

    def __call__(self, event: Event) -> None:
        if event.type == "state":
            data = event.data
            self.progress.update(
                self.task,
                completed=float(data.get("progress") or 0.0),
                status=data["status"],
                description=data.get("progress_message") or "",
            )
        elif event.type == "metrics":
            for point in event.data["points"]:
                if point["key"] in self.SHOWN or point["key"].startswith("validation_"):
                    self.latest.setdefault(point["key"], {})[point.get("worker")] = point["value"]
            self.progress.update(self.task, metrics=self.summary())

    def summary(self) -> str:
        parts = []
        for key, by_worker in sorted(self.latest.items()):
            values = list(by_worker.values())
            value = sum(values) if key == "samples_per_s" else sum(values) / len(values)
            parts.append(f"{key} {value:.4g}")
        return " · ".join(parts)

    def _line(self, status: str, progress: float | None, message: str | None) -> Text:
        # The console soft-wraps: a state wider than the terminal still prints whole.
        return final_line(status, progress or 0.0, message or "", self.summary(), width=self.console.width)


def final_line(status: str, progress: float, message: str, metrics: str, *, width: int) -> Text:
    """``STATE  NN%  message  metrics`` in ``width`` columns: the state whole, the rest cut with an ellipsis."""
    line = Text(f"{status:<{STATE_WIDTH}}", style="bold")
    rest = Text(f" {100 * progress:3.0f}%  ").append_text(_detail(message, metrics))
    room = width - len(line)
    if room > 1:
        rest.truncate(room, overflow="ellipsis")
        line.append_text(rest)
    line.rstrip()
    return line


def _fixed(width: int) -> Column:
    return Column(width=width, no_wrap=True)
