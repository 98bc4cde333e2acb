"""Every preset each config file documents, shared by the compile tier (tests/test_compile.py,
every jitted program at the preset's full shapes) and the smoke tier (tests/test_smoke.py,
every stage run at full shapes)."""

# (config module, argument before ',smoke', extra stages): every preset each config file
# documents, at the paper's shapes unless the preset exists only for CPU ('standard').
PRESETS = [
    ("baseline", "fashion_mnist", ()),
    ("teachers", "fashion_mnist", ()),
    ("teacher_sweep", "fashion_mnist", ()),
    ("dgd", "fashion_mnist", ("audit",)),
    ("dgd", "fashion_mnist,eps1", ()),
    ("dgd", "fashion_mnist,eps3", ()),
    ("dgd", "fashion_mnist,plus", ()),
    ("dgd", "fashion_mnist,table1", ()),
    ("dgd", "fashion_mnist,private_baseline", ()),
    ("dgd", "fashion_mnist,standard", ()),
    ("pate", "fashion_mnist", ()),
    ("pate", "fashion_mnist,plus", ()),
    ("pate", "fashion_mnist,ldp1", ()),
    ("dpdfd", "fashion_mnist", ()),
    ("dpdfd", "fashion_mnist,eps1", ()),
    ("dpdfd", "fashion_mnist,ensemble", ()),
    ("dpdfd", "fashion_mnist,direct", ()),
    ("ldp", "fashion_mnist,ldp1", ()),
    ("ldp", "fashion_mnist,ldp5", ()),
    ("dpsgd", "fashion_mnist,eps3", ()),
    ("dpsgd", "fashion_mnist,eps1,cnn", ()),
    ("dpsgd", "fashion_mnist,eps10,scatternet_cnn", ()),
]
IDS = [f"{m}:{a}" + "".join(f"+{e}" for e in extra) for m, a, extra in PRESETS]

# The stages each preset runs by default, written out here (not read from the plan), so that a
# change to what a preset runs shows up as a test failure.
_DGD = ("baseline", "teachers", "generator", "queries", "student")
_PATE = ("teachers", "queries", "student")
PRESET_STAGES = {
    "baseline": ("baseline",), "teachers": ("teachers",), "teacher_sweep": ("teacher_sweep",),
    "dgd": _DGD, "pate": _PATE, "ldp": ("baseline", "ldp"), "dpsgd": ("dpsgd",),
    "dpdfd": ("baseline", "dpdfd", "dpdfd_samples"),
    "dpdfd:ensemble": ("baseline", "teachers", "generator", "dpdfd"),
    "dpdfd:direct": ("dpdfd",),
}


def preset_stages(module: str, arg: str) -> tuple[str, ...]:
  """``PRESET_STAGES`` of a preset: its own entry where its argument names one, else its
  config file's."""
  for token in arg.split(","):
    if f"{module}:{token}" in PRESET_STAGES:
      return PRESET_STAGES[f"{module}:{token}"]
  return PRESET_STAGES[module]

# The CPU presets (and DP-SGD's default), which derive their counts and schedules from the
# data they are given: compiled on 1,500 and 8,000 mock images in CI's second tier
# (tests/test_compile.py) and run there through every stage in the smoke tier
# (tests/test_smoke.py).
CPU_PRESETS = [("baseline", "cpu"), ("teachers", "cpu"), ("teacher_sweep", "cpu"),
               ("dgd", "cpu"), ("dgd", "cpu,eps1"), ("dgd", "cpu,generator"),
               ("pate", "cpu"), ("dpdfd", "cpu"), ("dpdfd", "cpu,ensemble"),
               ("dpdfd", "cpu,direct"), ("ldp", "cpu"), ("dpsgd", "eps3")]
MOCK_SIZES = (1500, 8000)  # private training images
MOCK_TEST_SIZE = 2000


def write_mock_data(folder, size: int) -> str:
  """``size`` learnable mock training images and MOCK_TEST_SIZE test images as an npz."""
  from conftest import write_npz  # pylint: disable=g-import-not-at-top
  return write_npz(folder, size, MOCK_TEST_SIZE, seed=0, name=f"mock_{size}.npz")


def check_counts_for_the_data(config, size: int) -> None:
  """The counts a CPU preset derives from the data: the teachers for N, DP-SGD's batch at
  most N, PATE's pool of 9/10 of the test split."""
  from dgd_jax.plan import queries as query_plan  # pylint: disable=g-import-not-at-top
  assert config.get("num_teachers", 1) != 0, "num_teachers=0 left unchosen"
  if config.get("num_teachers_chosen"):
    assert config.num_teachers == query_plan.num_teachers_for(
        size, *query_plan.count_budget(config)), config.method
  if "dpsgd" in config:
    assert 1 <= config.dpsgd.batch_size <= size and config.dpsgd.num_steps >= 1
  if config.get("pool", {}).get("source") == "public":
    assert config.pool.size == MOCK_TEST_SIZE * 9 // 10 > config.queries.num_queries
