"""Downstream tasks: what a pretrained body is used for once pretraining stops.

``reading.py`` holds what every task shares to read text (how each family frames a text as ids, the
hidden states of any family's body); ``finetune.py`` the fine-tuning loop, whose optimizer step is
pretraining's own (``train.step.OptimizerStep``); one module per task beside them.
"""
