r"""DPDFD (Liu et al., IJCAI 2023): converts a trained model (the baseline; or the teacher
ensemble, Sec. 4.4) into a DP student by data-free distillation with the normalised-gradient
Gaussian mechanism A_{C,sigma} on the student's outputs (Algorithm 1, Eq. 4).

Argument: '<dataset>[,cpu][,eps1|eps10][,ensemble[,generator]|direct]'. ``eps10`` (default)
and ``eps1`` set the budget (DPDFD Table 1, delta = 1e-5); the noise multiplier is the least
that keeps the planned steps within it under ``privacy.accountant`` and
``privacy.dpdfd_analysis`` (computed when the run starts and reported; set ``dpdfd.noise`` to
fix it instead).
``ensemble`` distils the 250 teachers instead of the baseline (analysis 'disjoint_teachers':
B T releases of 2C, the teachers' shards being disjoint), queried once on DGD's DeepInversion
set (``synthetic``; that set is not covered by the epsilon, as in DGD);
``ensemble,generator`` queries them on Algorithm 1's generator instead (everything covered,
but it collapses to one class: it learns only from the student). ``direct`` trains on the labelled
private data with the same mechanism (Sec. 4.4; analysis 'direct': T steps on B of N drawn
without replacement). ``direct`` is LABEL DP only: its update back-propagates through the
private inputs without noise, so its epsilon protects the labels, not the examples
(``privacy.dpdfd``).

Noise convention: ``dpdfd.noise`` is sigma in Eq. 4, a multiplier of C (noise std sigma*C).
Analysis: 'whole_batch' (default for one teacher: B T releases of 2C, what the code releases
for a teacher trained on the private data); 'theorem3' is the paper's claim (see
``privacy.dpdfd``), not the default.

COMMAND (quick CPU preset):
  python -m dgd_jax.main --config=dgd_jax/configs/dpdfd.py:fashion_mnist,cpu \
      --workdir=workdirs/dpdfd_cpu

Measured results: RESULTS.md, "DPDFD".
"""
import ml_collections

from dgd_jax.configs import baseline as baseline_config
from dgd_jax.configs import common
from dgd_jax.configs import dgd as dgd_config

BUDGETS = {"eps10": 10.0, "eps1": 1.0}  # DPDFD Table 1
# The ensemble's synthetic samples queried per budget (the rest only in self-training): the
# noise per row grows as the square root of their number, so a fraction of the pool at less
# noise each, with self-training carrying the labels to the rest, teaches more than all of it;
# the smaller the budget, the smaller that fraction.
QUERIED = {"eps10": 2048, "eps1": 256}


# 'ensemble' or 'direct' replace the baseline as the sensitive model; 'generator' queries the
# ensemble on Algorithm 1's generator (``synthetic`` otherwise).
GRAMMAR = common.Grammar(
    "dpdfd.py", choices=(common.Choice("budget", tuple(BUDGETS), "eps10"),
                         common.Choice("teacher", ("ensemble", "direct"), None)),
    flags=("generator",), requires=(("generator", "ensemble"),))


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  budget = arg["budget"]
  ensemble, direct, generator = (arg["teacher"] == "ensemble", arg["teacher"] == "direct",
                                 arg.flag("generator"))
  config = baseline_config.make(arg.dataset, arg.preset, arg.smoke)
  paper = config.preset == "paper"
  config.method = "dpdfd"
  config.budget = budget
  if ensemble:
    config.num_teachers = 250
    config.teachers = common.teachers_config(config.preset)
  config.dpdfd = ml_collections.ConfigDict(dict(
      # The sensitive model(s): baseline | ensemble | private_data (direct training).
      teacher="ensemble" if ensemble else "private_data" if direct else "baseline",
      num_steps=2000 if paper else 1500,  # T
      batch_size=64,  # B
      # L_T: kd (plain KD) | dkd (Zhao et al. 2022, the paper's). kd: without noise, the
      # quick preset's student learns more with it than with dkd.
      loss="kd",
      operation="per_sample",  # per_sample | batch (Eq. 4 as printed) | clip (Fig. 2)
      norm_bound=1e-3,  # C (DPDFD Fig. 2: small C is best with normalisation)
      noise=0.0,  # sigma, a multiplier of C; 0 = the least that fits privacy.max_epsilon
      # y_s = phi_s(D) - gamma * g_tilde (Alg. 1 line 9). gamma = B / C lets a noiseless
      # target move each logit by up to 1 (g_tilde rows have norm < C / B); gamma = 1
      # moves them by 1.6e-5 and the student learns nothing.
      gamma=64 / 1e-3,
      learning_rate=1e-3,  # gamma_s (Adam)
      generator_learning_rate=1e-3,  # gamma_g (Adam)
      alpha=1.0,  # Eq. 5 information-entropy weight (DPDFD: 1)
      # Eq. 5 feature-norm weight. The paper's 1 (rewarded, as DAFL, or penalised) leaves
      # the noiseless quick student at chance: the generator chases feature norms.
      beta=0.0,
      latent_dim=100,
      features=128 if paper else 32,  # generator width (DAFL architecture)
      num_synthetic=10000,  # samples the released generator writes (the samples stage)
      # student: L_T's gradient at the student's outputs (Algorithm 1); uniform: at zero
      # logits, so each released row is a noisy soft vote of the teacher(s) (dpdfd.REFERENCES)
      reference="student",
      # > 0: afterwards, the student trains this many epochs more on all B T released rows
      # (post-processing, no extra epsilon); keeps B T inputs in memory.
      replay_epochs=0,
      # Where the inputs D come from: 'generator' (Algorithm 1's, trained alongside) or
      # 'synthetic' (the generator stage's fixed set, DeepInversion of the baseline: B T of
      # its samples queried once each, in order).
      inputs="generator",
      mixup=0.0,  # > 0: the replay mixes its pairs (mixup, Zhang et al. 2018; post-processing)
      # > 0 (needs replay): this many rounds of self-training after the replay, each a fresh
      # student trained on the last one's predictions on the released inputs, or on the whole
      # synthetic set with inputs='synthetic', queried or not (post-processing)
      self_training=0,
  ))
  config.privacy = common.privacy_config(BUDGETS[budget], accountant="rdp")
  # privacy.dpdfd: whole_batch (one teacher, nothing assumed) | disjoint_teachers (the ensemble,
  # disjoint shards, replace-one; checked on the shards) | direct (LABEL DP only) | theorem3
  config.privacy.dpdfd_analysis = ("direct" if direct else "disjoint_teachers" if ensemble
                                   else "whole_batch")
  # the ensemble on a class-spanning synthetic set (``synthetic``)
  if ensemble and not generator:
    synthetic(config, paper)
  return config


def synthetic(config, paper: bool) -> None:
  """The ensemble queried once on DGD's DeepInversion set: Algorithm 1's generator
  collapses to one class the teachers agree on (it learns only from the student); the inverted
  set spans the classes.
  8000 inverted samples, ``QUERIED`` of them queried once each (at eps 10: T = 32 steps of
  B = 64; reference 'uniform': each row a noisy soft vote of the teachers); the student then
  replays the released rows for 30 epochs, mixed (mixup 0.4), on targets sharpened by gamma
  (5 B / C), and three rounds of self-training on all 8000 follow (all post-processing). PLD
  calibrates the noise (exact for Gaussian rows: less noise than RDP for the same epsilon). The
  synthetic set is inverted from the non-private baseline with statistics of the private set:
  as in DGD, it is not covered by the epsilon."""
  config.generator = dgd_config.generator_config(paper)
  config.generator.update(dgd_config.INVERSION)  # 8000 samples
  d = config.dpdfd
  d.update(inputs="synthetic", reference="uniform", replay_epochs=30, mixup=0.4, self_training=3,
           num_steps=QUERIED[config.budget] // d.batch_size, gamma=5 * d.gamma)
  config.privacy.accountant = "pld"
