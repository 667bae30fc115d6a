"""The version of daskwp (recorded in batch jobs and their summaries)."""

__version__ = "0.1.0"
