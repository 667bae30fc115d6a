"""Batch jobs (docs/design.md §4, docs/batch-jobs.md): configuration, inputs, resumable atomic
output and the driver. ``run_job(load_config("conf/job.yaml"))`` is what ``daskwp run`` does."""

from .config import (CONFIG_KEYS, JOB_KEYS, PATH_KEYS, JobConfig, default_value, load_config,
                     make_config, parse_override, resolve_path)
from .driver import (build_tokenizer, check_window_parameters, format_summary, job_parameters,
                     prepare_output, resolve_device, run_job, validate_job)
from .errors import ConfigError, InputError, JobError, OutputConflictError
from .inputs import (INPUT_FORMATS, InputFile, PartitionSpec, count_partition,
                     lines_to_arrow, list_input_files, plan_partitions, read_partition,
                     remove_spool_dir)
from .parts import (JOB_FILE, SUMMARY_FILE, TMP_PREFIX, check_part, part_name,
                    partition_statistics, verify_output, write_partition)

__all__ = [
    "CONFIG_KEYS", "ConfigError", "INPUT_FORMATS", "InputError", "InputFile", "JOB_FILE",
    "JOB_KEYS", "JobConfig", "JobError", "OutputConflictError", "PATH_KEYS", "PartitionSpec",
    "SUMMARY_FILE", "TMP_PREFIX", "build_tokenizer", "check_part", "check_window_parameters",
    "count_partition", "default_value", "format_summary", "job_parameters", "lines_to_arrow",
    "list_input_files", "load_config", "make_config", "parse_override", "part_name",
    "partition_statistics", "plan_partitions", "prepare_output", "read_partition",
    "remove_spool_dir", "resolve_device", "resolve_path", "run_job", "validate_job", "verify_output",
    "write_partition",
]
