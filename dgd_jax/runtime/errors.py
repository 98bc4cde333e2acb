"""Errors caused by the user's input. Each message names the cause and the fix; the command
line prints it without a traceback."""


class UserInputError(ValueError):
  """Bad input: a config value, a dataset, a workdir."""


class ConfigError(UserInputError):
  """A config value no stage can use."""


class DatasetError(UserInputError):
  """A dataset that cannot be found or read."""


class WorkdirConflictError(UserInputError):
  """The workdir holds artefacts of another config."""


class WorkdirLockedError(UserInputError):
  """Another run is writing to the workdir."""


class DamagedArtefactError(UserInputError):
  """A workdir file that cannot be read (cut short, corrupted): names the stage to recompute."""


class WorkdirNotWritableError(UserInputError):
  """The workdir cannot be written (permissions, a read-only or full disk)."""


class PrivacyAuditError(RuntimeError):
  """An empirical lower bound on epsilon above the epsilon a run states: a privacy bug."""
