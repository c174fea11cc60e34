"""Errors of ``velobins reproduce``."""

from __future__ import annotations


class ReproduceError(RuntimeError):
    """A step of the reproduction failed (the message names the model and its log file)."""
