"""Errors of batch jobs; the CLI maps them to exit statuses (docs/batch-jobs.md)."""

from __future__ import annotations

__all__ = ["ConfigError", "InputError", "JobError", "OutputConflictError"]


class JobError(Exception):
    """A batch job cannot run or did not complete; the message says why."""


class ConfigError(JobError):
    """A job configuration value is not allowed (a config key, a parameter, a path)."""


class InputError(JobError):
    """An input cannot be listed or read, or lacks the text column."""


class OutputConflictError(JobError):
    """The output directory holds data this job did not write."""
