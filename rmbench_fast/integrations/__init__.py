"""Integrations with training loops: RMBenchCallback scores the model a transformers / TRL Trainer is training.
May import: errors, store, models, inputs, results, engine (the Python API); never cli or tiny.

The callback (integrations.callback) runs the Python API (engine.api) on the trainer's own model
objects every N steps, logs the metrics through the trainer's callbacks (TensorBoard, W&B, ...) and
writes each step's results under the training's output folder; integrations.steps holds what makes
that safe inside a training run: weight digests, step folders read back, RNG states kept.
"""

from .callback import RMBenchCallback

__all__ = ["RMBenchCallback"]
