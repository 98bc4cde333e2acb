r"""Does a pool inverted to where a student still disagrees with the baseline teach more?

Question: the standard preset's student learns the teachers' vote shares on the DeepInversion
pool and stops near 80.9% at 500 steps (82.2% at 1,500) on real images, where the teachers'
plurality reaches 85%: the pool's content binds (RESULTS.md, DGD, "The presets"). Adaptive
DeepInversion (Yin et al. 2020, Sec. 3.3, Eq. 8) adds a competition term to the inversion,
R_compete(x) = 1 - JS(p_b(x), p_s(x)), so that each new batch lands where a student trained
on the samples so far disagrees with the network inverted: samples that the pool does not yet
teach. Does such a pool carry more of the teachers' function to real images?
Answer: a little, and less than one noise draw moves the student. On the standard preset's
seed-2 run (4,000 samples each, one seed), weight 1 makes a pool on which a proxy learns the
baseline's own softmax far better (84.14% on real images against 80.25% for the control), but
the teachers' noiseless vote shares teach 81.31% (500 student steps) and 82.18% (1,500)
against the control's 80.94% and 81.72%, and 80.77% against 80.60% with the noise of eps 10
(sigma 44.71, one draw); the teachers agree less on it (top vote share 0.561 against 0.575).
Weight 10: proxy 85.86%, top vote share 0.489, student 81.32% noiseless, 80.17% noisy.
Feeds: RESULTS.md, DGD, "The presets".

Privacy: the proxy student learns the baseline's softmax on the samples, so the pool is a
noise-free function of the baseline, as the run's pool is (the run's epsilon is conditional
on the synthetic inputs); nothing the proxy learns reaches the probe's student except through
which samples the teachers are asked about. A development diagnostic: it reads the teachers'
votes without noise; nothing here is a release.

Method: ``--num`` samples inverted in the run's DeepInversion batches, settings and private
feature statistics (``generative.inversion_loss``), each batch's loss plus ``--weight`` x
R_compete against a proxy student (the baseline's architecture: the preset's width-1 student
made each batch 16 times slower) held fixed during the batch; after each batch the proxy
takes ``--proxy_steps`` Adam steps of cross-entropy to the baseline's softmax on every sample
inverted so far (``--weight=0``: plain DeepInversion, the control, its proxy trained and scored
all the same: how far the baseline's softmax on the samples carries to real images). Then the
run's teachers' vote histograms on the samples, and the run's student (Brier score, as the
student stage learns a gaussian_histogram release) trained for each of ``--student_steps`` on
their noiseless shares (the ceiling) and, with ``--sigma`` > 0, on the shares of
h~ = h + N(0, sigma^2 I) (the release; sigma 44.71 with 4,000 queries is eps 10.000 `pld`,
delta 1e-5). ``--samples`` reuses a saved pool instead of inverting.

  python experiments/competition_inversion_probe.py --workdir=workdirs/std_s2 --num=4000 \
      --weight=1.0 --proxy_steps=50 --student_steps=500,1500 --sigma=44.71
"""
from __future__ import annotations

import os
import tempfile
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
import optax

from dgd_jax.plan import artefacts
from dgd_jax.plan import student_fit
from dgd_jax.run import pipeline
from dgd_jax.runtime import progress
from dgd_jax.synthesis import generative
from dgd_jax.training import ensemble
from dgd_jax.training import train

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished DGD run.")
flags.mark_flag_as_required("workdir")
_NUM = flags.DEFINE_integer("num", 4000, "Samples to invert.")
_WEIGHT = flags.DEFINE_float("weight", 1.0, "R_compete's weight (0: plain DeepInversion).")
_PROXY_STEPS = flags.DEFINE_integer("proxy_steps", 50, "The proxy's Adam steps after each "
                                    "inverted batch.")
_PROXY_LR = flags.DEFINE_float("proxy_lr", 1e-3, "The proxy's Adam learning rate.")
_STUDENT_STEPS = flags.DEFINE_list("student_steps", ["500"], "The probe students' lengths.")
_SIGMA = flags.DEFINE_float("sigma", 0.0, "> 0: also a student on the shares of the noisy "
                            "histograms h + N(0, sigma^2 I).")
_SAMPLES = flags.DEFINE_string("samples", "", "A pool saved by an earlier probe (.npy): skip "
                               "the inversion.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the inversion, the proxy and the noise.")


def js_divergence(logits_p: jnp.ndarray, logits_q: jnp.ndarray) -> jnp.ndarray:
  """[B] Jensen-Shannon divergence of softmax(logits_p) and softmax(logits_q), in nats."""
  logp, logq = jax.nn.log_softmax(logits_p), jax.nn.log_softmax(logits_q)
  logm = jnp.logaddexp(logp, logq) - jnp.log(2.0)
  kl = lambda loga: jnp.sum(jnp.exp(loga) * (loga - logm), -1)
  return 0.5 * kl(logp) + 0.5 * kl(logq)


def invert_competing(ctx, key: jax.Array, num: int) -> np.ndarray:
  """``num`` samples by DeepInversion against the run's baseline plus ``--weight`` x
  R_compete against a proxy student trained between batches (module docstring)."""
  config, data, g = ctx.config, ctx.dataset, ctx.config.generator
  base, base_params = artefacts.load_classifier(ctx, "baseline", lowering="conv")
  stats = generative.layer_statistics(base.apply, base_params, data.x_train)  # PRIVATE
  priors = generative.GeneratorSettings.from_config(g).priors  # the generator stage's
  b, k = g.inversion_batch_size, data.num_classes
  y = jnp.asarray(generative.inversion_classes(b, b, k))
  proxy = artefacts.classifier(config, k, lowering="conv")  # the baseline's width
  tx, proxy_tx = optax.adam(g.inversion_learning_rate), optax.adam(_PROXY_LR.value)
  init_key, inversion_key, proxy_key = jax.random.split(key, 3)
  proxy_state = train.create_train_state(proxy, proxy_tx, init_key, data.image_shape)
  weight = _WEIGHT.value

  @jax.jit
  def update(v, opt_state, step_key, proxy_params):
    def loss_fn(v):
      x = jnp.tanh(v)
      loss = generative.inversion_loss(x, y, step_key, base.apply, base_params, priors, stats)
      if weight > 0:  # ADI Eq. 8: R_compete = 1 - JS(p_b, p_s)
        js = js_divergence(base.apply(base_params, x), proxy.apply(proxy_params, x)).mean()
        loss = loss + weight * (1.0 - js)
      return loss

    loss, grads = jax.value_and_grad(loss_fn)(v)
    updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(v, updates), opt_state, loss

  @jax.jit
  def proxy_step(state, step_key, x, soft, filled):
    idx = jax.random.randint(step_key, (config.student.batch_size,), 0, filled)
    loss_fn = lambda p: optax.softmax_cross_entropy(proxy.apply(p, x[idx]), soft[idx]).mean()
    return state.apply_gradients(grads=jax.grad(loss_fn)(state.params))

  batches = -(-num // b)
  x_all = jnp.zeros((batches * b,) + tuple(data.image_shape))
  soft_all = jnp.zeros((batches * b, k))
  for i in range(batches):
    t0, batch_key = time.time(), jax.random.fold_in(inversion_key, i)
    v = jax.random.normal(batch_key, (b,) + tuple(data.image_shape))
    opt_state = tx.init(v)
    for s in range(g.inversion_steps):
      v, opt_state, loss = update(v, opt_state, jax.random.fold_in(batch_key, s + 1),
                                  proxy_state.params)
    x = jnp.tanh(v)
    logits = base.apply(base_params, x)
    js = js_divergence(logits, proxy.apply(proxy_state.params, x)).mean()  # the batch's proxy
    x_all = x_all.at[i * b:(i + 1) * b].set(x)
    soft_all = soft_all.at[i * b:(i + 1) * b].set(jax.nn.softmax(logits))
    for s in range(_PROXY_STEPS.value):
      step_key = jax.random.fold_in(jax.random.fold_in(proxy_key, i), s)
      proxy_state = proxy_step(proxy_state, step_key, x_all, soft_all, (i + 1) * b)
    proxy_acc = (train.accuracy(proxy.apply, proxy_state.params, data.x_test, data.y_test)
                 if _PROXY_STEPS.value else float("nan"))
    hit = float(jnp.mean(logits.argmax(-1) == y))
    print(f"batch {i + 1}/{batches}: loss {float(loss):.3f}, JS(baseline, proxy) "
          f"{float(js):.3f}, baseline's class = target {hit:.3f}, proxy on the real test set "
          f"{proxy_acc:.2%} ({time.time() - t0:.0f} s)", flush=True)
  return np.asarray(x_all[:num])


def main(argv):
  del argv
  progress.setup_cli_logging()
  ctx = pipeline.open_run(_WORKDIR.value, "student")
  config, data = ctx.config, ctx.dataset
  key, folder = jax.random.key(_SEED.value), tempfile.mkdtemp()
  t0 = time.time()
  if _SAMPLES.value:
    x = np.load(_SAMPLES.value)
  else:
    x = invert_competing(ctx, key, _NUM.value)
    np.save(os.path.join(folder, "samples.npy"), x)
  print(f"{len(x)} samples ({time.time() - t0:.0f} s), in {folder}", flush=True)

  teachers, predict, _ = artefacts.load_teachers(ctx)
  votes = ensemble.vote_histograms(predict, teachers, x, data.num_classes)  # PRIVATE
  n = config.num_teachers
  print(f"teachers' mean top vote share {votes.max(1).mean() / n:.3f}", flush=True)
  noise = np.random.default_rng(_SEED.value).standard_normal(votes.shape)
  plans = {"clean": votes} | ({"raw": votes + _SIGMA.value * noise} if _SIGMA.value > 0 else {})
  for steps in _STUDENT_STEPS.value:
    config.student.num_steps = int(steps)
    for kind, h in plans.items():
      t0, name = time.time(), f"probe_{steps}_{kind}"
      student, rounds, _ = student_fit.train_student(
          ctx, (None, None), x, student_fit.shares(h, n), x[:0], name,
          os.path.join(folder, name), brier=True)
      accuracy = train.accuracy(student.apply, rounds[-1], data.x_test, data.y_test)
      print(f"  {steps} steps, {kind}: student {accuracy:.2%} ({time.time() - t0:.0f} s)",
            flush=True)


if __name__ == "__main__":
  app.run(main)
