r"""Privacy audit of a finished run (see ``dgd_jax.audit.attacks`` and ``stages/audit.py``):

  python -m dgd_jax.audit --workdir=workdirs/quickstart_cpu [--splits=10] [--prior=auto]
  python -m dgd_jax.audit --workdir=workdirs/dpsgd_eps3 --canaries=1000

Reads the run's config.json, attacks the models its finished stages saved, writes
<workdir>/audit/ and adds ``audit`` to report.json and report.md (never to release/). Trains
nothing, except with ``--canaries``: one more run of its DP-SGD steps with that many gradient
canaries, or of its label release with vote canaries, or of DPDFD's steps with model
canaries, and of an LDP client with feature canaries (``dgd_jax.audit.canaries``), each
one-run epsilon lower bound against its claim.
Parses flags and calls ``pipeline.run``; the library never reads FLAGS.
"""
from __future__ import annotations

import json
import os
import sys

from absl import app, flags

from dgd_jax.configs import common
from dgd_jax.plan.context import Config
from dgd_jax.runner import methods
from dgd_jax.runner import pipeline
from dgd_jax.runtime import progress
from dgd_jax.runtime.errors import PrivacyAuditError, UserInputError, WorkdirConflictError
from dgd_jax.runtime.workdir import Stage, Workdir
from dgd_jax.stages import audit as audit_stage

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished run's workdir.")
_SPLITS = flags.DEFINE_integer("splits", None, "Balanced member/non-member splits.")
_EXAMPLES = flags.DEFINE_integer("examples", None, "Members (and non-members) per split.")
_PRIOR = flags.DEFINE_enum("prior", None, ["auto", "generator", "pixel"],
                           "Model-inversion prior.")
_STEPS = flags.DEFINE_integer("inversion_steps", None, "Gradient steps per inversion.")
_CANARIES = flags.DEFINE_integer(
    "canaries", None, "M > 0: one more run of the run's DP-SGD steps (dpsgd.py; dgd.py's "
    "private_baseline) with M gradient canaries, else of its label release with M vote "
    "canaries, else of DPDFD's steps with M model canaries, and of its LDP client with M "
    "feature canaries, each in with probability 1/2; each one-run epsilon lower bound beside "
    "its claim.")
flags.mark_flags_as_required(["workdir"])


def audit_run(workdir: str, overrides: dict) -> dict:
  """The run's config with the audit's settings, checked against what the workdir holds;
  runs the audit stage and returns the report."""
  wd = Workdir(workdir)
  config = Config(wd.read_config())
  audit = config.audit.to_dict() if "audit" in config else common.audit_config().to_dict()
  audit.update({k: v for k, v in overrides.items() if v is not None})
  config.audit = audit
  missing = [n for n in audit_stage.requires(methods.plan_stages(config))
             if not Stage(wd, n, methods.stage_slice(n, config)).done()]
  if missing:
    raise WorkdirConflictError(f"{workdir}: stages {missing} are not finished; the audit "
                               "trains nothing. Finish the run with `python -m "
                               "dgd_jax.main` first.")
  stage = Stage(wd, "audit", methods.stage_slice("audit", config))
  try:
    stage.check()
  except WorkdirConflictError as e:
    raise WorkdirConflictError(f"{e}\nTo audit with other settings, remove {stage.path} (the "
                               "earlier audit's results).") from None
  return pipeline.run(config, workdir, ("audit",))


def main(argv):
  del argv
  progress.setup_cli_logging()
  try:
    report = audit_run(_WORKDIR.value, {"splits": _SPLITS.value, "examples": _EXAMPLES.value,
                                        "prior": _PRIOR.value,
                                        "inversion_steps": _STEPS.value,
                                        "canaries": _CANARIES.value})
  except UserInputError as e:
    sys.exit(f"error: {e}")
  except PrivacyAuditError as e:
    sys.exit(f"AUDIT FAILED: {e}")
  a = report["audit"]
  print(json.dumps({"membership_auc": a["membership_auc"],
                    "epsilon_lower_bound": a["epsilon_lower_bound"],
                    "inversion_similarity": a["inversion_similarity"],
                    **{key: {k: a[key][k] for k in (
                        "epsilon_lower_bound", "one_run", "one_run_fdp", "claimed_epsilon",
                        "canaries")} for key in audit_stage.CANARY_AUDITS if key in a}}))
  print(f"report: {os.path.join(_WORKDIR.value, 'report.md')}")


if __name__ == "__main__":
  app.run(main)
