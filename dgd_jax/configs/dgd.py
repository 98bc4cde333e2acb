r"""DGD (Discriminative-Generative Distillation, Ge et al. 2023): baseline, teachers,
data-free generator, VAE, noisy label queries on a few synthetic samples, student.

Argument: '<dataset>[,cpu|standard][,eps10|eps3|eps1][,table1|plus][,private_baseline]
[,generator][,vit]'.
``eps10`` (default), ``eps3`` and ``eps1`` set the budget (DGD Table I: epsilon 10 and 1;
delta 1e-5). By default the query plan
(aggregator, noise, number of queries) is chosen for the budget (``query_plan``) and the
generator adds feature-statistics matching to Eq. 2; ``table1`` is the paper's own method
(Eq. 2 alone, LNMax b = 40 with 1300 / 27 queries), ``plus`` DGD+ (the same fixed plan with
GNMax sigma 40). ``cpu`` is the quick preset (2 CPU cores), ``standard`` the longer one
(the paper-width student), the default the paper's widths and schedules (a GPU job). The CPU
presets synthesise with DeepInversion, train their teachers on mixed pairs of their own
images (``TEACHER_MIXUP``) and a mixup student (``inversion``; the quick one with a shorter
data-free diagnostic, ``QUICK``); ``generator`` keeps DGD's generator there, and plain
teachers.
The budget guard refuses a plan whose data-independent epsilon (``privacy.accountant``, delta
1e-5) exceeds ``privacy.max_epsilon``. ``private_baseline`` trains the baseline with DP-SGD
and accounts it with the queries in one epsilon (``private``). ``vit`` gives the teachers a
vision transformer (``vit_teachers``: DGD Table II's ViT-B/16 from a public checkpoint at the
paper preset, a small one from a random init on the CPU presets); ``cifar10,paper`` is Table
II itself (``vit``, 100 teachers, the budget eps3 unless one is given).

COMMAND (quick CPU preset):
  python -m dgd_jax.main --config=dgd_jax/configs/dgd.py:fashion_mnist,cpu \
      --workdir=workdirs/dgd_cpu
COMMAND (DGD Table II: CIFAR-10, 100 ViT-B/16 teachers from a public checkpoint, eps 3; a GPU):
  python -m dgd_jax.main --config=dgd_jax/configs/dgd.py:cifar10,paper \
      --config.model.checkpoint=/data/ViT-B_16.npz --workdir=workdirs/dgd_cifar10
COMMAND (standard CPU preset, eps 1):
  python -m dgd_jax.main --config=dgd_jax/configs/dgd.py:fashion_mnist,standard,eps1 \
      --workdir=workdirs/dgd_standard_eps1

The student's VAE-triple regulariser (DGD Eq. 4-6) and its FixMatch consistency term are
implemented but off by default: both ask the student to agree on moved synthetic samples, and
moving one can change what the teachers would call it.

Measured results: RESULTS.md, DGD, "The presets".
"""
import ml_collections

from dgd_jax.configs import baseline as baseline_config
from dgd_jax.configs import common

BUDGETS = {"eps10": (1300, 10.0), "eps3": (300, 3.0), "eps1": (27, 1.0)}  # queries, epsilon
# private_baseline: the fixed GNMax sigma 40 queries per budget; the
# baseline's DP-SGD noise is calibrated to fill the rest of the budget.
PRIVATE_BASELINE_QUERIES = {"eps10": 1000, "eps3": 300, "eps1": 50}
# Presets: 'standard' is the longer CPU preset (the quick one's widths and synthesis,
# teachers trained twice as long at eps 10, a paper-width student). Flags: 'table1' (the paper's
# own method: Eq. 2 alone and the fixed LNMax plan), 'plus' (DGD+: the fixed plan with GNMax
# sigma 40), 'private_baseline' (``private``), 'generator' (the CPU presets with DGD's
# generator instead of DeepInversion), 'vit' (the teachers a ViT: ``vit_teachers``).
GRAMMAR = common.Grammar(
    "dgd.py", presets=common.PRESETS + ("standard",),
    choices=(common.Choice("budget", tuple(BUDGETS), None),),  # eps10; Table II: eps3
    flags=("table1", "plus", "private_baseline", "generator", "vit"))
TABLE2_DATASET = "cifar10"  # its paper preset is DGD Table II (``vit_teachers``)


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  table2 = arg.dataset == TABLE2_DATASET and arg.preset == "paper"
  budget = arg["budget"] or ("eps3" if table2 else "eps10")  # Table II is at epsilon 3
  standard = arg.preset == "standard"
  table1, plus, private_baseline, generator, vit = (arg.flag(f) for f in GRAMMAR.flags)
  config = baseline_config.make(arg.dataset, "cpu" if standard else arg.preset, arg.smoke)
  paper = config.preset == "paper"
  if standard:
    config.preset = "standard"
  config.method = "dgd"
  # 0: chosen for the private set when the run starts (250, DGD IV-A, from 20,000 examples;
  # query_plan.num_teachers_for)
  config.num_teachers = 0
  config.teachers = common.teachers_config(config.preset)
  config.generator = generator_config(paper, table1)
  config.pool = common.pool_config("synthetic")
  config.vae = common.vae_config(paper)
  num_queries, max_epsilon = BUDGETS[budget]
  config.queries = common.queries_config(num_queries, "gnmax" if plus else "lnmax",
                                         noise_scale=40.0)  # Laplace b = 2/eps0 (DGD IV-A)
  if not (table1 or plus):  # the plan chosen for the budget (query_plan), at most 10,000
    config.queries.update(plan="auto", num_queries=10000)
  config.privacy = common.privacy_config(max_epsilon, accountant="rdp")
  config.student = common.student_config()
  config.student.diagnose_noiseless = True  # report what the label noise costs
  if not (paper or table1):
    config.student.width = 0.5  # wider than the 0.25 teachers: one model learns all they label
  if standard:  # longer teachers, a paper-width student (a longer generator collapses)
    config.teachers.num_steps = 600
    config.student.width = 1.0
  if not (paper or table1 or private_baseline or generator):
    inversion(config)
    # 600 teacher steps, 1,200 for the standard preset at eps 10: longer-trained teachers
    # agree more often on the right class and so teach the student more, up to that length;
    # beyond it, more steps or more teachers buy little for their time
    config.teachers.num_steps = 1200 if standard and budget == "eps10" else 600
    # teachers trained on mixed pairs agree more on the synthetic pool, so the same noise
    # hides less of their votes
    config.teachers.mixup = TEACHER_MIXUP
    if not standard:  # the quick preset's shorter data-free diagnostic
      config.generator.update(QUICK)
    if budget == "eps1":  # the noisiest release: self-training carries it to the whole pool
      config.student.self_training = 3
  if private_baseline:
    private(config, budget)
  if vit or table2:
    vit_teachers(config)
  return config


def generator_config(paper: bool, table1: bool = False) -> ml_collections.ConfigDict:
  """The generator stage: DGD's data-free generator (Eq. 2, with feature-statistics matching
  unless ``table1``), or DeepInversion with ``INVERSION``."""
  return ml_collections.ConfigDict(dict(
      rounds=200 if paper else 20,  # DGD IV-A: 200 rounds
      iterations_per_round=120 if paper else 25,  # a round: DAFL's epoch of 120 iterations
      batch_size=512 if paper else 128,  # DAFL's MNIST batch
      # DGD IV-A: 0.2 (Adam, as DAFL), divided by 10 every decay_every rounds; 0.2 diverges
      # with statistics matching (REFERENCE Sec. 8), 0.02 does not.
      learning_rate=0.2 if table1 else 0.02,
      decay_every=80 if paper else 8,
      latent_dim=100,
      features=128 if paper else 32,  # DAFL generator width
      standardize_output=False,  # tanh output in [-1, 1] like our data (DAFL: a final BN)
      alpha=5.0,  # Eq. 2 weight of the information-entropy term (natural log)
      beta=0.1,  # Eq. 2 weight of the activation term
      num_synthetic=0,  # 0: as many as the private training set (DGD IV-A)
      # Image priors beside Eq. 2 (generative.Priors; 0/False = Eq. 2 alone, 'table1').
      w_stats=0.0 if table1 else 3.0,  # feature-statistics matching (DeepInversion Eq. 4)
      w_tv=0.0,  # total variation
      jitter=0,  # random shift (pixels) of the samples the baseline sees
      mirror=False,  # random left-right mirror of the samples the baseline sees
      # > 1: generate this many times num_synthetic, keep those the baseline labels most
      # confidently and stably under small shifts (stages/generator.py)
      oversample=1.0 if table1 else 2.0,
      # 'generator' (the above) or 'inversion': DeepInversion, each sample's pixels optimised
      # against the baseline with the same priors (generative.invert), so that the set cannot
      # collapse onto a few templates
      synthesis="generator",
      inversion_steps=200,  # Adam steps per batch of inverted samples
      inversion_learning_rate=0.1,
      inversion_batch_size=250,  # samples optimised together: R_feature is a batch statistic
      # > 0: each inverted sample's target mixes its class with another, up to this share
      # (generative.inversion_targets): samples towards the baseline's class boundaries
      target_mix=0.0,
      # steps of the data-free diagnostic (DGD Fig. 4: the baseline's architecture trained on
      # the synthetic set, scored on the real test set); 0 = the baseline's schedule
      synthetic_student_steps=0,
  ))


# The CPU presets' synthesis (``inversion``): DeepInversion, 8000 samples, twice the
# ``HISTOGRAMS`` queried: the students that learn the whole pool (ensemble distillation,
# self-training, propagation) read the unqueried half at no epsilon.
INVERSION = dict(synthesis="inversion", w_stats=10.0, jitter=1, oversample=1.0,
                 num_synthetic=8000)


# The CPU presets' release (``inversion``): for half the synthetic set, the noisy vote
# histograms (the whole histogram, GNMax's epsilon; stages/student.py learns the vote shares)
# or, where their noise per teacher is large, the noisy count of each sample's own class
# (``query_plan.CLASS_COUNT_NOISE_PER_VOTE``: 'auto_counts'). They teach more than the GNMax
# plan where the noise per teacher is large (small ensembles, small budgets) and about as much
# elsewhere; half the pool queried is where the count of releases and their noise balance.
HISTOGRAMS = 4000

# The CPU presets' teachers train on mixed pairs of their own minibatches (``teachers.mixup``).
TEACHER_MIXUP = 0.4

# The quick preset's cut (a short run on 2 cores): a 500-step data-free diagnostic instead
# of the baseline's 1500. Its inversion is the standard one's (200 steps of lr 0.1): a halved
# one saves little time and teaches the student less.
QUICK = dict(synthetic_student_steps=500)


def inversion(config) -> None:
  """The CPU presets' synthesis and student: DeepInversion
  against the baseline (generative.invert: statistics matching w 10, jitter 1, 200 Adam steps
  per batch) makes 8000 samples, each optimised on its own, instead of DGD's generator, whose
  samples collapse towards class templates; the teachers agree with one another more on them
  (their plurality labels are more often a real image's class). The automatic plan releases,
  for ``HISTOGRAMS`` samples with the least noise that fits the budget under PLD, the noisy
  vote histograms or, where their noise per teacher would be large (few teachers, a small
  budget), the noisy count of the votes for the class each sample was inverted for
  (``auto_counts``), and the student learns the vote shares or the counts, its labelled
  pairs mixed (mixup 0.4), five such students distilled into the one released where the
  noise per teacher is large (``student.ensemble = 0``: stages/student.py, ``members``). With
  ``queries.aggregator='gnmax'`` the plan trades label accuracy against count instead (add
  ``privacy.accountant='rdp'`` for GNMax's data-dependent epsilon: PLD accounts its
  data-independent bound only), and when those labels cover at most 5% of the pool (eps 1,
  small ensembles), the student learns the whole pool labelled by label propagation
  (stages/student.py)."""
  config.generator.update(INVERSION)
  if config.queries.plan == "auto":  # not DGD+'s fixed GNMax plan
    config.queries.update(aggregator="auto_counts", num_queries=HISTOGRAMS)
    # Q Gaussian histograms (or counts) compose to one Gaussian mechanism, whose epsilon the 'pld'
    # accountant gives exactly (dp_accounting.get_epsilon_gaussian): sigma 44.71 at eps 10,
    # where RDP's conversion needs 47.37.
    config.privacy.accountant = "pld"
  config.student.mixup = 0.4
  config.student.propagation = 10
  config.student.ensemble = 0  # chosen for the release's noise per teacher


# DGD Table II: 100 teachers, each a ViT pretrained on ImageNet and fine-tuned on its shard
# with a new 10-way head; the baseline and the student stay the paper CNN.
TABLE2_TEACHERS = 100
# What each of the 100 ViT-B/16 teachers trains: all of them with Adam need about 138 GB for
# parameters and moments alone (100 x 86M x 16 bytes), over one H200's 141 GB; the last block,
# the final norm and the head (about 7M each) leave room for activations at 224 x 224.
TABLE2_TRAINABLE = "last:1"
# The CPU presets' ViT teachers: patch 8 on 32 x 32 images (a 4 x 4 grid), width 64, 2 blocks,
# trained for CPU_VIT_STEPS (patch 4 costs 4.5 times as much per step).
CPU_VIT = "mu/8"
CPU_VIT_STEPS = 300


def vit_teachers(config) -> None:
  """The teachers a ViT (``config.model.backbone``; ``models.backbone``). The paper preset:
  DGD Table II's 100 ViT-B/16 teachers from ``config.model.checkpoint`` (a public
  big_vision / AugReg ImageNet checkpoint: the path is the user's to give), images resized to
  its 224 x 224, training ``TABLE2_TRAINABLE``. The CPU presets: a small ViT (``CPU_VIT``)
  from a random init, every weight trained, on the images as they are."""
  paper = config.preset == "paper"
  config.model.update(backbone="vit", roles=("teachers",),
                      variant="B/16" if paper else CPU_VIT,
                      trainable=TABLE2_TRAINABLE if paper else "all",
                      image_size=224 if paper else 0)
  if paper:
    config.num_teachers = TABLE2_TEACHERS
    # fine-tuning, not training from scratch (not tuned: no GPU has run Table II yet)
    config.teachers.update(learning_rate=1e-4, num_steps=1000)
  else:
    config.teachers.num_steps = CPU_VIT_STEPS


def private(config, budget: str) -> None:
  """End-to-end accounted DGD: the baseline the generator inverts is trained
  with DP-SGD (stages.baseline.run_private: 300 Poisson batches of expected 1024, clip 1,
  Adam on the noisy mean), its steps composed with a fixed GNMax plan under dp-accounting's PLD
  (replace-one, as the votes). Statistics matching reads private activations without noise:
  off."""
  config.baseline.update(num_steps=300, learning_rate=2e-3)  # 5 epochs of 1024: CPU minutes
  config.baseline.dpsgd = ml_collections.ConfigDict(dict(
      batch_size=1024,  # expected Poisson batch
      norm_bound=1.0,  # per-example clip norm C
      noise=0.0,  # 0: the least noise that, with the queries, fits privacy.max_epsilon
      sampling="poisson",
      microbatch_size=32,
  ))
  config.generator.w_stats = 0.0
  config.queries.update(plan="fixed", aggregator="gnmax", noise_scale=40.0,
                        num_queries=PRIVATE_BASELINE_QUERIES[budget])
  config.privacy.accountant = "pld"  # the composition is PLD-only (privacy.ledger)
