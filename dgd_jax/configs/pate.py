r"""PATE (Papernot et al. 2017; PATE+ = Papernot et al. 2018): teachers on disjoint
partitions label a public, unlabelled pool through noisy aggregation, and a student trains
on it: supervised on the labelled part and, optionally, semi-supervised on the whole pool
with DGD's VAE-triple regulariser (the pool stands in for DGD's synthetic set).

Argument: '<dataset>[,cpu][,plus][,q100][,ldp1|ldp5]'. Protocol of PATE 2017 Sec. 4: the pool is the
first 9,000 test examples (labels never read), the last 1,000 evaluate the student; 1000
queries by default (``q100``: 100). PATE: LNMax, Laplace scale 1/gamma = 20 (gamma = 0.05).
``plus``: Confident-GNMax (T = 200, sigma1 = 150, sigma2 = 40; PATE 2018 Table 2, MNIST).
The headline epsilon is PATE's data-dependent one (``rdp_data_dependent``); the report lists
the data-independent epsilons beside it. ``ldp1`` / ``ldp5``: the queries come from an LDP
client (masking + local Laplace noise, LDP paper's (1, 1%) / (5, 10%)) and the teachers are
trained to be robust to them (LDP Eq. 3); the report adds the client's local epsilon.

COMMAND (quick CPU preset, reusing a finished teachers stage when the workdir has one):
  python -m dgd_jax.main --config=dgd_jax/configs/pate.py:fashion_mnist,cpu \
      --workdir=workdirs/pate_cpu
"""
from dgd_jax import ldp
from dgd_jax.configs import common

QUERIES = {"q100": 100, "q1000": 1000}
GRAMMAR = common.Grammar(
    "pate.py", choices=(common.Choice("queries", tuple(QUERIES), "q1000"),
                        common.Choice("client", tuple(ldp.PRESETS), None)),
    flags=("plus",))


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  plus, client, preset = arg.flag("plus"), arg["client"] or "", arg.preset
  num_queries = QUERIES[arg["queries"]]
  config = common.base_config(arg.dataset, preset, arg.smoke)
  config.method = "pate"
  config.num_teachers = 250
  config.teachers = common.teachers_config(preset)
  config.pool = common.pool_config("public", size=9000)  # PATE 2017 Sec. 4
  config.vae = common.vae_config(preset == "paper")
  if plus:
    config.queries = common.queries_config(num_queries, "confident_gnmax", noise_scale=40.0)
    config.queries.update(threshold=200.0, sigma1=150.0)  # PATE 2018 Table 2 (MNIST)
  else:
    config.queries = common.queries_config(num_queries, "lnmax", noise_scale=20.0)  # 1/gamma
  config.privacy = common.privacy_config(max_epsilon=0.0, accountant="rdp_data_dependent")
  config.student = common.student_config()
  if client:
    config.ldp = common.ldp_config(client, robust_teachers=True)
    config.queries.client = "ldp"
  return config
