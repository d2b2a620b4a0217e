"""Transformers' own callback machinery driven as ``Trainer.train`` drives it, without torch.

``Trainer`` needs torch; what it does with callbacks does not. ``ShellTrainer`` builds the
real ``CallbackHandler`` from the same lists as ``Trainer.__init__`` (``DefaultFlowCallback``,
the integrations that ``TrainingArguments.report_to`` names, including the built-in
``KubeflowCallback`` when ``KUBEFLOW_TRAINER_SERVER_URL`` is set, then the caller's), keeps
a real ``TrainerState`` and ``TrainerControl``, and calls the handler's events in the
order of ``Trainer.train`` (the optimizer-step events, which no Kubeflow callback uses,
left out). Logging follows ``Trainer``: a log when ``DefaultFlowCallback``
asks for one, ``epoch`` added as ``Trainer.log`` does, and the final speed metrics,
``total_flos`` and ``train_loss`` before train end. Also imported by a subprocess that
runs against the oldest supported transformers.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerControl, TrainerState, TrainingArguments
from transformers.integrations import get_reporting_integration_callbacks
from transformers.trainer_callback import CallbackHandler, DefaultFlowCallback

# What ``Trainer`` logs at the end of a short run (speed metrics are rounded as there).
FINAL_LOGS: dict[str, float] = {
    "train_runtime": 12.3456,
    "train_samples_per_second": 41.472,
    "train_steps_per_second": 1.62,
    "total_flos": 1.5614101487616e16,
    "train_loss": 2.718281828459045,
}


def arguments(output_dir: str, **options: Any) -> TrainingArguments:
    """``TrainingArguments`` (real: ``report_to`` resolution and the Kubeflow switch are
    theirs), logging every 5 steps, no progress bar."""
    options.setdefault("logging_steps", 5)
    options.setdefault("report_to", "none")
    return TrainingArguments(output_dir=output_dir, disable_tqdm=True, **options)


class ShellTrainer:
    def __init__(
        self,
        args: TrainingArguments,
        callbacks: list[Any] | None = None,
        *,
        max_steps: int = 20,
        steps_per_epoch: int = 10,
        is_world_process_zero: bool = True,
    ) -> None:
        self.args = args
        self.steps_per_epoch = steps_per_epoch
        defaults = [DefaultFlowCallback, *get_reporting_integration_callbacks(args.report_to)]
        self.callback_handler = CallbackHandler(
            defaults + list(callbacks or []), None, None, None, None
        )
        self.state = TrainerState(
            max_steps=max_steps,
            logging_steps=args.logging_steps,
            num_train_epochs=max(1, max_steps // steps_per_epoch),
            is_world_process_zero=is_world_process_zero,
            is_local_process_zero=is_world_process_zero,
        )
        self.control = TrainerControl()

    def add_callback(self, callback: Any) -> None:
        self.callback_handler.add_callback(callback)

    def remove_callback(self, callback: Any) -> None:
        self.callback_handler.remove_callback(callback)

    def callback_names(self) -> list[str]:
        return [type(callback).__name__ for callback in self.callback_handler.callbacks]

    def log(self, logs: dict[str, float]) -> None:
        if self.state.epoch is not None:
            logs["epoch"] = self.state.epoch
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.control = self.callback_handler.on_log(self.args, self.state, self.control, logs)

    def train(self) -> None:
        handler, args, state = self.callback_handler, self.args, self.state
        self.control = handler.on_train_begin(args, state, self.control)
        epochs = -(-state.max_steps // self.steps_per_epoch)
        for epoch in range(epochs):
            self.control = handler.on_epoch_begin(args, state, self.control)
            for step in range(self.steps_per_epoch):
                if state.global_step >= state.max_steps:
                    break
                self.control = handler.on_step_begin(args, state, self.control)
                state.global_step += 1
                state.epoch = epoch + (step + 1) / self.steps_per_epoch
                self.control = handler.on_step_end(args, state, self.control)
                if self.control.should_log:
                    loss = 10.0 / (state.global_step + 1)
                    self.log({"loss": loss, "grad_norm": 1.25, "learning_rate": 5e-05})
            self.control = handler.on_epoch_end(args, state, self.control)
        state.total_flos = FINAL_LOGS["total_flos"]
        self.log(dict(FINAL_LOGS))
        self.control = handler.on_train_end(args, state, self.control)
