r"""PATE (Papernot et al. 2017; PATE+ = Papernot et al. 2018): teachers on disjoint
partitions label a public, unlabelled pool through noisy aggregation, and a student trains
on it: supervised on the labelled part and, optionally, semi-supervised on the whole pool
with DGD's VAE-triple regulariser (the pool stands in for DGD's synthetic set).

Argument: '<dataset>[,cpu][,plus][,ss][,eps1|eps2|eps3|eps5|eps10][,q100][,ldp1|ldp5]'. Protocol
of PATE 2017 Sec. 4: the pool is the first 9/10 of the test split (9,000 of 10,000 test
examples; labels never read), the rest evaluates the student; 1000 queries by default (``q100``: 100). PATE: LNMax, Laplace scale
1/gamma = 20 (gamma = 0.05); its headline epsilon is the data-independent one (``rdp``: every
query charged, a DP guarantee), with PATE 2017's data-dependent one (``rdp_data_dependent``, a
function of the votes, not a DP release) beside it as a diagnostic.
``plus``: Confident-GNMax (T = 200, sigma1 = 150, sigma2 = 40; PATE 2018 Table 2, MNIST) under a
Renyi filter (Feldman & Zrnic 2021) of budget ``eps3`` unless another is given: the GNMax step
is charged only on answered queries, querying stops before the budget could be exceeded, and
the headline is the filter's epsilon (``renyi_filter``), a DP guarantee, with the data-dependent
diagnostics beside it. ``plus,ss``: no filter; the queries' data-dependent epsilon is also
released with noise scaled to its smooth sensitivity (PATE 2018 Sec. 4), in the queries stage's
result. Without the filter, a budget token is the budget guard on the data-independent plan
(``privacy.max_epsilon``). ``ldp1`` / ``ldp5``: the queries come from an LDP client (masking +
local Laplace noise, LDP paper's (1, 1%) / (5, 10%)) and the teachers are trained to be robust
to them (LDP Eq. 3); the report adds the client's local epsilon.

COMMAND (quick CPU preset, reusing a finished teachers stage when the workdir has one):
  python -m dgd_jax.main --config=dgd_jax/configs/pate.py:fashion_mnist,cpu \
      --workdir=workdirs/pate_cpu
"""
import math

from dgd_jax.configs import common
from dgd_jax.training import ldp

QUERIES = {"q100": 100, "q1000": 1000}
BUDGETS = {"eps1": 1.0, "eps2": 2.0, "eps3": 3.0, "eps5": 5.0, "eps10": 10.0}
GRAMMAR = common.Grammar(
    "pate.py", choices=(common.Choice("queries", tuple(QUERIES), "q1000"),
                        common.Choice("client", tuple(ldp.PRESETS), None),
                        common.Choice("budget", tuple(BUDGETS), None)),
    flags=("plus", "ss"), requires=(("ss", "plus"),))


def get_config(arg: str | None = None):
  arg = common.parse_arg(arg, GRAMMAR)
  plus, client, preset = arg.flag("plus"), arg["client"] or "", arg.preset
  num_queries = QUERIES[arg["queries"]]
  config = common.base_config(arg.dataset, preset, arg.smoke)
  config.method = "pate"
  config.num_teachers = 250
  config.teachers = common.teachers_config(preset)
  config.pool = common.pool_config("public", size=0)  # 9/10 of the test split: PATE 2017 Sec. 4
  config.vae = common.vae_config(preset == "paper")
  budget = BUDGETS[arg["budget"]] if arg["budget"] else math.inf  # no budget token: no guard
  config.privacy = common.privacy_config(max_epsilon=budget, accountant="rdp")
  if plus:
    config.queries = common.queries_config(num_queries, "confident_gnmax", noise_scale=40.0)
    config.queries.update(threshold=200.0, sigma1=150.0)  # PATE 2018 Table 2 (MNIST)
    if arg.flag("ss"):  # PATE 2018 Sec. 4: the data-dependent epsilon, released
      config.queries.smooth_sensitivity = True  # at parameters fixed before the votes
      config.privacy.accountant = "smooth_sensitivity"  # the release composed at its order
    else:  # Feldman & Zrnic 2021: answered-only charging as a DP guarantee
      config.queries.filter = True
      config.privacy.update(max_epsilon=BUDGETS[arg["budget"] or "eps3"],
                            accountant="renyi_filter")
  else:
    config.queries = common.queries_config(num_queries, "lnmax", noise_scale=20.0)  # 1/gamma
  config.student = common.student_config()
  if client:
    config.ldp = common.ldp_config(client, robust_teachers=True)
    config.queries.client = "ldp"
  return config
