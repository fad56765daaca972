"""Pretraining objectives: each one a pure corruption function plus a loss, outside the model.

An objective turns a batch of raw token windows into model inputs and labels (``prepare``) and
computes the summed loss over the positions that carry one (``loss``). The training loop knows
nothing else about it, which is what lets MLM, CLM, span corruption, denoising, ELECTRA, prefix
LM and the masked + causal hybrid be compared on one loop at equal tokens, time or FLOPs.

Objectives never reach into model internals: they call the model's public ``forward``.
"""
