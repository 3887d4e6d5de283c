"""The training engine: one loop (`train`) for every system, driven by a task (`Task`) and its config.

    from crate_nn.tasks import get_preset      # importing crate_nn.tasks registers every task and preset
    from crate_nn.engine import train
    result = train(get_preset("digits", epochs=10, output_dir="runs/digits10"))

Modules: `config` (TrainConfig, `option`), `task` (Task, RunPlan, Clock, presets), `loop` (train), `optim`,
`schedule`, `ema`, `precision`, `distributed`, `run_dir`.
"""
from .config import TrainConfig, option
from .loop import NonFiniteLossError, Preempted, TrainResult, initial_model, start_task, train
from .task import (
    PRESETS,
    Clock,
    LossOutput,
    RunPlan,
    Task,
    get_preset,
    list_presets,
    preset,
    recorded_config,
    register_task,
)

__all__ = ["PRESETS", "Clock", "LossOutput", "NonFiniteLossError", "Preempted", "RunPlan", "Task", "TrainConfig",
           "TrainResult", "get_preset", "initial_model", "list_presets", "option", "preset", "recorded_config",
           "register_task",
           "start_task", "train"]
