"""Student stage (DGD Eq. 1, 5, 6): the student phi_s trained on the few synthetic samples
D_s with the teachers' noisy labels (Eq. 5) and, semi-supervised, on VAE triples of the
unlabelled samples D_u (Eq. 6), as ``dgd_jax.plan.student_fit`` implements them. D_s and D_u
come from the unlabelled pool (``dgd_jax.plan.pool``: DGD's synthetic set, or PATE's public pool).
It reads only the pool, the released labels, the VAE and (for evaluation) the test set, never
the private training data.

``student_accuracy_noiseless_labels`` is a diagnostic, not a release: the same student trained
on the teachers' noiseless plurality (or vote shares) for the same queried samples (read from
the queries stage's private vote histograms), so the report shows what the label noise costs.

The VAE stage runs only when Eq. 6 is on (``uses_vae``): with its weights at 0 the student
never reads the VAE, and training it would only cost time.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from dgd_jax.labelling import aggregation
from dgd_jax.labelling import propagation
from dgd_jax.plan import pool
from dgd_jax.plan import queries as query_plan
from dgd_jax.plan.artefacts import (classifier, fit_config, load_queries, load_vae, load_votes,
                                    student_fits, vae_model)
from dgd_jax.plan.context import Context, Program, abstract, abstract_key
from dgd_jax.plan.student_fit import members, propagates, settings, train_student
from dgd_jax.runtime import plots
from dgd_jax.runtime.errors import ConfigError
from dgd_jax.training import train
from dgd_jax.training.student import class_count_targets, make_step, shares, uses_vae

# 'vae' stays in the student's key even when unused, so workdirs made before the VAE stage
# became optional are still this config's.
CONFIG_KEYS = ("student", "vae")


def requires(config) -> tuple[str, ...]:
  return ("queries", "vae") if uses_vae(config.student) else ("queries",)


def check(config) -> None:
  """Refuses a student block the stage cannot train, before any stage runs."""
  for field, least, meaning in (("ensemble", 0, "chosen for the release's noise"),
                                ("self_training", 0, "none")):
    value = config.student[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
      raise ConfigError(f"config.student.{field}={value!r}: it must be a whole number of at "
                        f"least {least} (--config.student.{field}={least}: {meaning}).")


def programs(config, data) -> dict[str, Program]:
  """The student's semi-supervised step (Eq. 1) at the config's shapes: on the planned
  queries' labels (the most that can be answered; with label propagation, the whole pool
  at most) and the rest of the pool; and where a student learns distributions over the
  whole pool (an ensemble's distillation, self-training), that step too."""
  q, k = query_plan.settings(config), data.num_classes
  size, labelled = pool.size_of(config, data), q.num_queries
  brier = aggregation.releases_counts(q.aggregator)
  shape = data.image_shape
  student = classifier(config, k, "student", lowering="conv")
  cfg = fit_config(config, "student")
  state = jax.eval_shape(lambda: train.create_train_state(
      student, train.optimizer(cfg), jax.random.key(0), shape))
  vae, vae_params = None, None
  if uses_vae(config.student):
    vae = vae_model(config, shape)
    key, one = jax.random.key(0), jnp.zeros((1,) + shape)
    vae_params = jax.eval_shape(lambda: vae.init(key, one, key)["params"])

  fit = settings(config.student, brier)
  step = lambda st, key, xs, ys, xu, vp: make_step(student, vae, vp, xs, ys, xu, fit)(st, key)

  def program(num: int, targets):  # train_student's step on num labelled samples
    return Program(step, (state, abstract_key(), abstract((num,) + shape), targets,
                          abstract((size - labelled,) + shape), vae_params))

  if brier:
    out = {"step": program(labelled, abstract((labelled, k)))}
  elif propagates(config, labelled, size):  # at most the whole pool reached
    out = {"step": program(size, abstract((size,), "int32"))}
  else:
    out = {"step": program(labelled, abstract((labelled,), "int32"))}
  if members(config, q.noise_scale) > 1 or config.student.self_training:
    out["distributions_step"] = program(size, abstract((size, k)))
  return out


def labelled_split(ctx: Context, x_pool: np.ndarray, votes: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(D_s, L_s, D_u, answered): the answered queries' pool samples and released labels (the
  released vote shares [L, K] where the queries released histograms, ``class_count_targets``
  where they released class counts), the pool samples not queried, and which queries were
  answered. With ``votes`` (the queries' noiseless vote histograms, a diagnostic) L_s is made
  of them as the release would have been without noise."""
  q = load_queries(ctx)
  answered = q["answered"]
  labelled = q["indices"][answered]
  n, k = ctx.config.num_teachers, ctx.dataset.num_classes
  clean = None if votes is None else votes[answered]
  if "counts" in q:  # the class counts: the labels are the classes counted
    classes = q["labels"][answered]
    counts = (q["counts"][answered] if clean is None
              else clean[np.arange(len(classes)), classes])
    targets = class_count_targets(counts, classes, n, k)
  elif "histograms" in q:  # the noisy histograms
    targets = shares(q["histograms"][answered] if clean is None else clean, n)
  else:
    targets = (q["labels"][answered] if clean is None else clean.argmax(-1)).astype(np.int32)
  return x_pool[labelled], targets, np.delete(x_pool, labelled, axis=0), answered


def run(ctx: Context) -> dict:
  config = ctx.config
  x_pool = pool.load(ctx)  # the synthetic set (DGD) or the public pool (PATE)
  x_s, y_s, x_u, answered = labelled_split(ctx, x_pool)
  x_eval, y_eval = pool.evaluation(ctx)  # the test split (PATE: the part not in the pool)
  vae = load_vae(ctx, x_pool.shape[1:]) if uses_vae(config.student) else (None, None)
  brier = y_s.ndim == 2  # released counts (histograms or class counts)
  propagated = not brier and propagates(config, len(x_s), len(x_pool))
  features = propagation.features(np.concatenate([x_s, x_u])) if propagated else None
  k = members(config, ctx.results.get("queries", {}).get("noise_scale"))
  student, rounds, trained = train_student(ctx, vae, x_s, y_s, x_u, "student",
                                           ctx.stage.checkpoint_dir, features, brier, k)
  accuracy = lambda params: train.accuracy(student.apply, params, x_eval, y_eval)
  diagnostic = {}
  if k > 1:  # the ensemble the student was distilled from, and its members
    probs = [jax.nn.softmax(train.logits(student.apply, p, x_eval)) for p in trained]
    hit = lambda p: float(np.mean(np.argmax(p, -1) == y_eval))
    diagnostic["ensemble_test_accuracy"] = hit(np.mean(probs, axis=0))
    diagnostic["member_test_accuracies"] = [hit(p) for p in probs]
  if len(rounds) > 1:
    diagnostic["test_accuracy_by_self_training_round"] = [accuracy(p) for p in rounds]
  if config.student.diagnose_noiseless:  # server-side diagnostic (module docstring)
    _, clean_targets, _, _ = labelled_split(ctx, x_pool, load_votes(ctx))
    _, clean, _ = train_student(ctx, vae, x_s, clean_targets, x_u, "student_noiseless",
                                os.path.join(ctx.stage.path, "noiseless_checkpoints"), features,
                                brier, k)
    diagnostic["student_accuracy_noiseless_labels"] = accuracy(clean[-1])
    diagnostic["noiseless_student"] = ("student/noiseless_checkpoints*; the student_noiseless* "
                                       "curves of metrics.jsonl and TensorBoard")
  curve = ctx.workdir.read_metrics("student")
  terms = [k for k in ("loss", "ce", "consistency", "normal", "tangent", "entropy")
           if curve and k in curve[0]]
  plots.line_plot(os.path.join(ctx.stage.path, "training_curve.png"),
                  [m["step"] for m in curve], {k: [m[k] for m in curve] for k in terms},
                  xlabel="step", ylabel="loss term", title="Student training (Eq. 1)")
  return {**diagnostic, "test_accuracy": accuracy(rounds[-1]),
          "ensemble": k,  # students trained on the release (``members``)
          # the released student's suffix of checkpoints/ (artefacts.load_classifier)
          "released_fit": student_fits(k, config.student.self_training)[-1],
          "num_evaluated": len(y_eval), "propagated": propagated,
          "num_labelled": int(answered.sum()), "num_unlabelled": len(x_u),
          "training_curve_png": "student/training_curve.png"}
