"""MindSpore's profiler over a few training steps, and the summary of its busiest operators."""

from __future__ import annotations

import csv
import logging
import os

from mindspore.train import Callback

from msdet.engine.training.callbacks.base import MEASURE

log = logging.getLogger("train")

# Per-operator-type statistics the profiler writes: (file pattern, type column, total time
# column, milliseconds per unit). CPU: measured with MindSpore 2.10. Ascend: CANN's
# op_statistic file as documented (not measured here).
OP_STATISTICS = (
    ("cpu_op_type_info_*.csv", "op_type", "total_compute_time", 1.0),
    ("op_statistic*.csv", "OP Type", "Total Time(us)", 1e-3),
)


class ProfilerCallback(Callback):
    """Profiles ``steps`` training steps with ``mindspore.profiler.profile`` and prints the
    operator types that took the most time (:func:`top_operators`).

    Profiling starts at step ``start`` (>= 2: step 1 compiles the graph) with one warm-up
    step that is not recorded, so steps ``start + 1 .. start + steps`` are measured. The
    trace lands in ``output_dir/<host>_<pid>_<time>_ascend_ms/`` (MindSpore's layout on
    every device; MindStudio Insight reads it).
    """

    phase = MEASURE

    def __init__(
        self, output_dir: str, steps: int, device: str = "CPU", start: int = 2, top: int = 15
    ):
        super().__init__()
        self.output_dir, self.steps, self.device = output_dir, int(steps), device
        self.start, self.top = max(int(start), 2), top
        self.profiler = None
        self.done = False

    def on_train_step_begin(self, run_context):
        step = run_context.original_args().cur_step_num
        if self.profiler is None and not self.done and step >= self.start:
            self.profiler = _start_profiler(self.output_dir, self.steps, self.device)
            self.seen = 0

    def on_train_step_end(self, run_context):
        if self.profiler is None:
            return
        self.profiler.step()  # the schedule writes and analyses the trace after the last one
        self.seen += 1
        if self.seen > self.steps:  # the warm-up step, then `steps` recorded ones
            self._finish()

    def on_train_end(self, run_context):
        if self.profiler is not None:
            self._finish()
        elif not self.done:
            log.warning(
                "runtime.profile_steps: the run ended before step %d; nothing was profiled",
                self.start,
            )

    def _finish(self):
        self.profiler.stop()
        self.profiler = None
        self.done = True
        print(top_operators(self.output_dir, self.top))


def _start_profiler(output_dir: str, steps: int, device: str):
    """``mindspore.profiler.profile`` (the replacement of the deprecated ``mindspore.Profiler``)
    recording host operators, plus device kernels on Ascend/GPU."""
    from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU]
    if device == "Ascend":
        activities.append(ProfilerActivity.NPU)
    elif device == "GPU":
        activities.append(ProfilerActivity.GPU)
    # Constructing it starts collection (start_profile=True); the schedule counts steps.
    return profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1, skip_first=0),
        on_trace_ready=tensorboard_trace_handler(output_dir),
    )


def top_operators(profile_dir: str, top: int = 15) -> str:
    """A table of the operator types that took the most time in a profile folder (the
    newest statistics file found under it)."""
    import glob

    found = [
        (glob.glob(os.path.join(profile_dir, "**", fmt[0]), recursive=True), fmt)
        for fmt in OP_STATISTICS
    ]
    found = [(files, fmt) for files, fmt in found if files]
    if not found:
        return f"no operator statistics found under {profile_dir}"
    files, (_, type_col, time_col, to_ms) = found[0]
    path = max(files, key=os.path.getmtime)
    totals: dict[str, float] = {}
    with open(path, encoding="utf-8") as f:
        for row in csv.DictReader(f):
            name = row[type_col]
            totals[name] = totals.get(name, 0.0) + float(row[time_col]) * to_ms
    grand = sum(totals.values()) or 1.0
    lines = [f"Top operators by time ({path}):", f"{'operator':<30} {'ms':>10} {'share':>7}"]
    for name, ms in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{name:<30} {ms:>10.1f} {100 * ms / grand:>6.1f}%")
    return "\n".join(lines)
