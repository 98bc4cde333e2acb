"""Pieces shared by every config file: the config argument's grammar, data and classifier
settings.

The argument is ``<dataset>[,<preset>][,<choice>...][,<flag>...][,smoke]``: the first token is
the dataset (a catalog name, ``idx:<dir>`` or ``npz:<file>``), every later token a preset, a
value of one of the file's choices (a budget, a model, ...) or one of its flags. The same as
``key=value`` pairs: ``dataset=fashion_mnist,preset=cpu,budget=eps3,plus=true``. Each config
file states what it accepts in its ``GRAMMAR``; ``parse_arg`` refuses anything else (an
unknown token, two values of one choice, a flag without the one it needs) with a one-line
``ConfigError`` naming the valid tokens and the closest match. ``smoke`` (any file, any
preset) keeps every shape and cuts every schedule to one step (``plan.checks.smoke_schedules``).
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import importlib
import importlib.util
import os
import pkgutil
import sys
from typing import Mapping, NamedTuple

import ml_collections

from dgd_jax.runtime.errors import ConfigError, UserInputError

PRESETS = ("paper", "cpu")
DEFAULT_DATASET = "fashion_mnist"
SMOKE = "smoke"  # the modifier: every schedule cut to SMOKE_STEPS, every shape kept
SMOKE_STEPS = 1  # one step runs every program once at its shapes
SMOKE_TEST_SIZE = 100  # test examples a smoke run evaluates on (after a public pool's)
# A smoke run keeps every shape that decides memory and compilation (widths, batch sizes,
# teacher counts, latent sizes, the query chunk) and cuts every count to what runs each
# shape once:
SMOKE_QUERIES = 500  # label queries: one full chunk of ensemble.QUERY_CHUNK
SMOKE_SYNTHETIC = 1000  # every unlabelled pool: the queries and as many unlabelled again
SMOKE_AUDIT_SPLITS = 2  # membership-audit splits (teachers audited: one per split)
# Schedule lengths the smoke modifier cuts, wherever they appear in a config; the counts it
# cuts are above (plan.checks.smoke_schedules), the private set is kept.
SCHEDULES = ("num_steps", "rounds", "iterations_per_round", "inversion_steps")
# Datasets whose paper classifier has the two extra fully connected layers (DGD IV-A).
SVHN_LIKE = ("svhn_cropped", "cifar10")
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


class Choice(NamedTuple):
  """One slot of a config argument: at most one of ``values``; ``default`` when none is given
  (None: the slot stays empty)."""
  name: str  # what the value is: 'preset', 'budget', 'model', ...
  values: tuple[str, ...]
  default: str | None


@dataclasses.dataclass(frozen=True)
class Grammar:
  """What one config file's argument may hold after the dataset."""
  file: str  # the config file's name, for messages: 'dgd.py'
  choices: tuple[Choice, ...] = ()  # besides the preset
  flags: tuple[str, ...] = ()
  presets: tuple[str, ...] = PRESETS  # the first is the default
  requires: tuple[tuple[str, str], ...] = ()  # (token, the token it needs)

  @property
  def slots(self) -> tuple[Choice, ...]:
    return (Choice("preset", self.presets, self.presets[0]),) + self.choices

  def describe(self) -> str:
    """'preset paper|cpu; budget eps10|eps3|eps1 (default eps10); flags plus, smoke'."""
    parts = [f"{c.name} {'|'.join(c.values)}" + (f" (default {c.default})" if c.default else "")
             for c in self.slots]
    return "; ".join(parts + [f"flags {', '.join(self.flags + (SMOKE,))}"])

  def tokens(self) -> tuple[str, ...]:
    return sum((c.values for c in self.slots), ()) + self.flags + (SMOKE,)


@dataclasses.dataclass(frozen=True)
class Arg:
  """A parsed config argument: ``arg['budget']`` is the value of a choice, ``arg.flag('plus')``
  whether a flag was given."""
  dataset: str
  smoke: bool
  values: Mapping[str, str | None]  # every slot of the grammar, the preset included
  flags: frozenset[str]

  @property
  def preset(self) -> str:
    return self.values["preset"]

  def __getitem__(self, name: str) -> str | None:
    return self.values[name]

  def flag(self, name: str) -> bool:
    return name in self.flags


def parse_arg(arg: str | None, grammar: Grammar) -> Arg:
  """'fashion_mnist,cpu,eps3' -> Arg(dataset='fashion_mnist', preset 'cpu', budget 'eps3').
  Anything ``grammar`` does not hold raises a one-line ConfigError."""
  items = [s.strip() for s in (arg or "").split(",") if s.strip()]

  def refuse(why: str):
    raise ConfigError(f"config argument {arg!r} of {grammar.file}: {why}. {grammar.file} takes "
                      f"<dataset>[,...] with {grammar.describe()}.")

  dataset = None
  if items and "=" not in items[0]:
    dataset = items.pop(0)
    if dataset in grammar.tokens() or dataset in _every_token():
      refuse(f"the first token is the dataset, and {dataset!r} is not one: start with the "
             f"dataset, e.g. '{DEFAULT_DATASET},{','.join([dataset] + items)}'")
  given: dict[str, str] = {}  # slot -> value
  flags, smoke = set(), False
  slot_of = {v: c.name for c in grammar.slots for v in c.values}
  keys = [c.name for c in grammar.slots] + list(grammar.flags) + ["dataset", SMOKE]
  for item in items:
    if "=" in item:  # key=value
      key, _, value = (s.strip() for s in item.partition("="))
      if key not in keys:
        refuse(f"unknown key {key!r}{_closest(key, keys)}; keys are {', '.join(keys)}")
      if key == "dataset":
        if dataset is not None:
          refuse(f"two datasets, {dataset!r} and {value!r}")
        dataset = value
        continue
      if key in grammar.flags or key == SMOKE:
        if value.lower() not in _TRUE + _FALSE:
          refuse(f"{key}={value!r}: a flag is {key}=true or {key}=false")
        if value.lower() in _FALSE:
          continue
        item = key
      else:
        if slot_of.get(value) != key:
          choice = next(c for c in grammar.slots if c.name == key)
          refuse(f"unknown {key} {value!r}{_closest(value, choice.values)}; the {key} is one "
                 f"of {'|'.join(choice.values)}")
        item = value
    if item == SMOKE:
      smoke = True
    elif item in grammar.flags:
      flags.add(item)
    elif item in slot_of:
      slot = slot_of[item]
      if given.get(slot, item) != item:
        refuse(f"two values of {slot}, {given[slot]!r} and {item!r}; give one of "
               f"{'|'.join(next(c.values for c in grammar.slots if c.name == slot))}")
      given[slot] = item
    else:
      hint = (_closest(item, grammar.tokens()) or _elsewhere(item)
              or " (the dataset is the first token only)")
      refuse(f"unknown token {item!r}{hint}")
  named = flags | set(given.values())
  for token, needed in grammar.requires:
    if token in named and needed not in named:
      refuse(f"{token!r} needs {needed!r}")
  values = {c.name: given.get(c.name, c.default) for c in grammar.slots}
  return Arg(dataset or DEFAULT_DATASET, smoke, values, frozenset(flags))


def _config_of(argv) -> ml_collections.ConfigDict | None:
  """The config that the command line's ``--config=<file>[:<arg>]`` names, loaded from the
  file (absl has not set the flag's value when an override fails), or None."""
  found = [a[len("--config="):] for a in argv[1:] if a.startswith("--config=")]
  if not found:
    return None
  path, _, arg = found[-1].partition(":")
  spec = importlib.util.spec_from_file_location("_config_file", path)
  if spec is None:
    return None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg or None)


def _missing_config_file(argv) -> str | None:
  """The one-line refusal of a ``--config=<file>`` that names no file (with the closest
  config file), or None."""
  for a in argv[1:]:
    if a.startswith("--config="):
      path = a[len("--config="):].partition(":")[0]
      if not os.path.isfile(path):
        here = os.path.dirname(os.path.abspath(__file__))
        files = [os.path.join(os.path.dirname(path), n) for n in grammars()]
        near = difflib.get_close_matches(path, files, n=1, cutoff=0.5)
        return (f"--config={path}: no such config file"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + f"; the config files are in {here}: {', '.join(grammars())}.")
  return None


def _unknown_override(argv, config) -> str | None:
  """The one-line refusal of the first ``--config.<name>=`` override that names no field of
  ``config`` (with the closest field), or None."""
  if config is None:
    return None
  fields = list(_field_names(config))
  for arg in argv[1:]:
    if arg.startswith("--config."):
      name = arg[len("--config."):].split("=", 1)[0]
      if name not in fields:
        return f"--config.{name}: the config has no field {name!r}{_closest(name, fields)}."
  return None


def _field_names(node, prefix: str = ""):
  """Every dotted field name of a ConfigDict: what a --config.<name> override may name."""
  for name, value in node.items():
    yield prefix + name
    if isinstance(value, ml_collections.ConfigDict):
      yield from _field_names(value, f"{prefix}{name}.")


def _closest(token: str, valid) -> str:
  match = difflib.get_close_matches(token, list(valid), n=1, cutoff=0.5)
  return f" (did you mean {match[0]!r}?)" if match else ""


@functools.cache
def grammars() -> dict[str, Grammar]:
  """Every config file's grammar, by file name ('dgd.py'), in file-name order."""
  import dgd_jax.configs as package  # pylint: disable=g-import-not-at-top
  found = {}
  for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
    grammar = getattr(importlib.import_module(f"{package.__name__}.{info.name}"), "GRAMMAR",
                      None)
    if grammar is not None:
      found[grammar.file] = grammar
  return found


def _every_token() -> set[str]:
  return {t for g in grammars().values() for t in g.tokens()}


def _elsewhere(token: str) -> str:
  files = [name for name, g in grammars().items() if token in g.tokens()]
  return f" (it belongs to {' and '.join(files)})" if files else ""


def catalog() -> str:
  """Every config file with what its argument takes: the command line's --help."""
  lines = ["Config files (--config=dgd_jax/configs/<file>:<dataset>[,preset][,choice...]"
           "[,flag...]; or key=value pairs, e.g. <file>:dataset=mnist,preset=cpu,smoke=true):"]
  lines += [f"  {name:<17}{g.describe()}" for name, g in grammars().items()]
  return "\n".join(lines) + "\n"


def parse_flags(argv):
  """``app.run``'s flags parser for a command line with a ``--config`` file flag: a config
  argument the config file refuses exits with the refusal's one-line message instead of a
  traceback. ml_collections re-raises the config file's error with the traceback in its
  message and absl wraps that in a flags error, so the message is the first error raised:
  the innermost UserInputError in the exception chain."""
  from absl import flags as absl_flags  # pylint: disable=g-import-not-at-top
  missing = _missing_config_file(argv)
  if missing:
    sys.exit(f"error: {missing}")
  try:
    return absl_flags.FLAGS(argv)
  except (absl_flags.Error, AttributeError, KeyError) as e:  # an override names no field
    first, link = None, e
    while link is not None:
      first = link if isinstance(link, UserInputError) else first
      link = link.__cause__ or link.__context__
    if first is not None:
      sys.exit(f"error: {first}")
    unknown = _unknown_override(argv, _config_of(argv))
    if unknown:
      sys.exit(f"error: {unknown}")
    if not isinstance(e, absl_flags.Error):
      raise
    sys.exit(f"error: {e}")


def base_config(dataset: str, preset: str, smoke: bool = False) -> ml_collections.ConfigDict:
  """Fields every method has: data source, seed, classifier architecture, logging."""
  config = ml_collections.ConfigDict()
  config.preset = preset
  # a smoke run: plan.checks.smoke_schedules cuts every schedule when the run starts
  config.smoke = smoke
  config.dataset = dataset
  config.data_dir = ""  # TFDS data dir; "" = TFDS's default (~/tensorflow_datasets)
  config.manual_dir = ""  # IDX files of a built-in dataset; "" = the dataset's default
  config.download = True  # may a built-in dataset be downloaded when no IDX files exist
  config.seed = 0  # public: initialisation, partitions, synthesis, minibatches, evaluation
  # The DP noise (and DP-SGD's batches): -1 draws it from a secret key kept in the workdir
  # (privacy.noise); N >= 0 makes it reproducible from N, for tests and papers: NOT a private
  # release (report.md says so).
  config.noise_seed = -1
  config.private_size = 0  # the first N training examples are the private set; 0 = all

  config.model = ml_collections.ConfigDict()
  config.model.width = 1.0 if preset == "paper" else 0.25  # multiplier of 64/128 channels
  config.model.hidden = (384, 192) if dataset in SVHN_LIKE else ()
  # Your own flax.linen.Module instead of the paper classifier ('package.module:Class', built
  # as Class(num_classes=K, **json(kwargs)); the widths and hidden then unused): every
  # classifier of a run (baseline, teachers, student) in every method but dpsgd.
  config.model.module = ""
  config.model.kwargs = ""  # JSON object of the module's keyword arguments, e.g. '{"features": 64}'
  # A public pretrained backbone (models.backbone) for the classifiers named in ``roles``
  # ('teachers', 'student': DGD's student, 'baseline': every other classifier; dpsgd takes
  # it with dpsgd.model='backbone'): '' = none, 'vit' = a ViT of ``variant`` ('Ti/16',
  # 'S/16', 'B/16', ...) started from ``checkpoint`` (a public big_vision / AugReg .npz or
  # an orbax directory; '' = a random init) with a fresh head, training ``trainable``
  # ('all' | 'head' | 'last:K'); images resized to ``image_size`` first (0 = as they are).
  config.model.backbone = ""
  config.model.variant = "B/16"
  config.model.checkpoint = ""
  config.model.trainable = "all"
  config.model.image_size = 0
  config.model.roles = ("teachers", "baseline", "student")

  config.log_every = 100
  config.checkpoint_every = 500
  return config


def with_overrides(config: ml_collections.ConfigDict, overrides
                   ) -> ml_collections.ConfigDict:
  """A copy of ``config`` with each ('block.field', value) of ``overrides`` (a dict or pairs)
  set: the one way sweeps and the comparison table change a preset."""
  config = copy.deepcopy(config)
  with config.unlocked():
    for name, value in dict(overrides).items():
      *parents, leaf = name.split(".")
      node = config
      for p in parents:
        node = node[p]
      node[leaf] = value
  return config


def teachers_config(preset: str) -> ml_collections.ConfigDict:
  """Teacher training (DGD IV-A: Adam, batch 128, 3000 iterations, linear decay to 0).
  The paper's teacher learning rate 0.05 is not the default: with Adam it leaves some of the
  250 quick-preset teachers on Fashion-MNIST at chance and the rest less accurate than 1e-3,
  the baseline's rate, and LNMax's accuracy falls with theirs. Set
  --config.teachers.learning_rate=0.05 for the paper's value."""
  paper = preset == "paper"
  return ml_collections.ConfigDict(dict(
      num_steps=3000 if paper else 300,
      width=0.0,  # the teachers' width multiplier; 0 = config.model.width (the baseline's)
      batch_size=128 if paper else 32,
      learning_rate=1e-3,
      end_learning_rate=0.0,
      augment=False,  # random shift/mirror of each minibatch (stages/teachers.py)
      mixup=0.0,  # > 0: each minibatch mixed in pairs, lam ~ Beta(mixup, mixup) (Zhang 2018)
      # 'shuffle': equal shards of a seeded permutation (replace-one only); 'stable': a keyed
      # hash of each example picks its teacher (add/remove-one too, and two teachers per
      # replaced example: data/partitions.py)
      partition="shuffle",
      chunk=0,  # teachers per vmapped chunk; 0 = backend default (ensemble.AUTO_CHUNK)
      noise_scales=(20.0, 40.0),  # Laplace scales b at which ensemble accuracy is reported
      # test images the ensemble's accuracies are measured on (the head of the test set);
      # 0 = all. A diagnostic: 2000 keep the CPU presets' evaluation short
      eval_size=0 if paper else 2000,
  ))


def pool_config(source: str, size: int = 0) -> ml_collections.ConfigDict:
  """The student's unlabelled pool (``dgd_jax.plan.pool``): 'synthetic' or 'public' (the test
  split's head: ``size`` examples, 0 for ``pool.PUBLIC_SHARE`` of the split)."""
  return ml_collections.ConfigDict(dict(source=source, size=size))


def vae_config(paper: bool) -> ml_collections.ConfigDict:
  """The VAE trained on the unlabelled pool (DGD IV-A)."""
  return ml_collections.ConfigDict(dict(
      latent_dim=32,  # c (DGD IV-A)
      features=32,
      tanh_output=True,  # data lies in [-1, 1] (False: linear, for standardised data)
      num_steps=500 if paper else 300,  # DGD IV-A: 500 iterations
      batch_size=128,
      learning_rate=1e-3,  # decaying linearly to 0 (DGD IV-A)
      end_learning_rate=0.0,
  ))


def queries_config(num_queries: int, aggregator: str, noise_scale: float
                   ) -> ml_collections.ConfigDict:
  """Label queries to the teacher ensemble (DGD Eq. 3, PATE)."""
  return ml_collections.ConfigDict(dict(
      num_queries=num_queries,  # |D_s|
      # a name of labelling.aggregation.AGGREGATORS, or auto_counts (plan 'auto': the class
      # counts or the histograms by the noise per teacher)
      aggregator=aggregator,
      noise_scale=noise_scale,  # the Laplace scale b, or the Gaussian sigma (sigma2)
      threshold=0.0,  # Confident-GNMax only
      sigma1=0.0,  # Confident-GNMax only
      # random | least_confident (PATE App. C.2) | representative (k-means centres of the
      # pool in ScatterNet space: propagation.representative)
      selection="random",
      first_round=0,  # least_confident: random queries that train the selecting student
      # gaussian_histogram, random: R > 0 asks the histograms in R + 1 rounds, the teachers of
      # each later round the last round's student refit on their partitions (stages/queries.py)
      refits=0,
      client="",  # "ldp": the client transforms its queries first (LDP Algorithm 1)
      # fixed: the fields above; auto: query_plan.choose for max_epsilon (gaussian_histogram:
      # num_queries histograms with the least noise that fits it)
      plan="fixed",
      # auto, and the smooth-sensitivity plan: the top class's assumed share of the votes
      # (the votes are not read)
      assumed_consensus=0.5,
      num_classes=10,  # auto: the dataset's number of classes K
      # (Confident-)GNMax under a Renyi filter of budget privacy.max_epsilon (Feldman & Zrnic
      # 2021): GNMax charged only when answered; needs privacy.accountant='renyi_filter'
      filter=False,
      smooth_sensitivity=False,  # also release the data-dependent epsilon (PATE 2018 Sec. 4)
      # its order, beta and sigma_ss, fixed before any vote (Thm. 23); 0 (all three): chosen
      # by the public plan on assumed_consensus (privacy.smooth_sensitivity.plan_release)
      ss_order=0.0,
      ss_beta=0.0,
      ss_sigma=0.0,
  ))


def privacy_config(max_epsilon: float, accountant: str) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      delta=1e-5,
      accountant=accountant,  # the headline's accountant, each preset's own
      max_epsilon=max_epsilon,  # budget guard on the data-independent plan; inf disables it
      # delta >= 1/N (N the private set's size) is refused unless this is set (report.md warns)
      allow_large_delta=False,
  ))


def student_config() -> ml_collections.ConfigDict:
  """The student (DGD Eq. 1 = Eq. 5 + Eq. 6)."""
  return ml_collections.ConfigDict(dict(
      num_steps=500,  # DGD IV-A: 500 iterations
      width=0.0,  # the student's width multiplier; 0 = config.model.width
      batch_size=128,  # labelled samples per step (D_s)
      unlabelled_batch_size=128,  # VAE triples per step (D_u)
      learning_rate=1e-3,  # decaying linearly to 0 (DGD IV-A)
      end_learning_rate=0.0,
      # Eq. 6 weights. Off by default: the terms ask the student to agree on moved synthetic
      # samples, and moving one can change what the teachers would call it; cross-entropy on
      # the labels alone teaches the quick DGD preset's student more.
      w_normal=0.0,
      w_tangent=0.0,
      w_entropy=0.0,
      eps_tangent=1.0,  # latent step along the tangent direction
      eps_normal=1.0,  # input-space L2 step along the normal direction
      adversarial=True,  # TNAR-style adversarial directions (False: random)
      # DGD's latent Laplace term (paper: 0.01); 0 = off: at 0.01 the noise (scale 2c/eps1)
      # swamps the normalised VAE code, so the decoded triples no longer resemble their inputs
      # (stages/vae.py reports it), and the VAE learns from synthetic data, so the term
      # protects nothing private
      eps1=0.0,
      augment=False,  # shift/mirror the labelled batch (post-processing, no epsilon)
      mixup=0.0,  # > 0: mixup's Beta(mixup, mixup) on the labelled batch (stages/student.py)
      w_consistency=0.0,  # FixMatch consistency on the unlabelled pool (stages/student.py)
      threshold=0.95,  # FixMatch's confidence threshold for a pseudo-label
      consistency_augment=True,  # False: no views, plain confident pseudo-labels
      diagnose_noiseless=False,  # also train on the noiseless plurality (a diagnostic)
      # > 0: while the released labels cover at most 5% of the pool, they are spread over it
      # by label propagation on the k-NN graph (this many neighbours) of ScatterNet features,
      # and the student learns every pool sample's likeliest label (stages/student.py)
      propagation=0,
      # k > 1: k students learn the released labels, each from its own initialisation and
      # minibatches, and a fresh student learns their mean predicted distribution over the
      # whole pool (post-processing, no epsilon); 0: chosen for the release's noise per
      # teacher (stages/student.py, ``members``)
      ensemble=1,
      # rounds of self-training: a fresh student trained on the last one's predicted
      # distributions over the whole pool (post-processing of the released labels, no epsilon)
      self_training=0,
  ))


def ldp_config(preset: str, robust_teachers: bool = False) -> ml_collections.ConfigDict:
  """The LDP client's transform (Algorithm 1) and the robust teachers' training (Eq. 3) for
  one of ``ldp.PRESETS`` ('ldp1': sigma 1, mu 1%; 'ldp5': sigma 5, mu 10%)."""
  from dgd_jax.training import ldp  # pylint: disable=g-import-not-at-top
  sigma, mu = ldp.PRESETS[preset]
  return ml_collections.ConfigDict(dict(
      sigma=sigma,  # Laplace scale B / sigma (Algorithm 1 line 3)
      mu=mu,  # masking rate: ceil(N mu) zeros (Algorithm 1 line 1)
      bound=ldp.DEFAULT_BOUND,  # B
      lam=0.2,  # Eq. 3 mix of perturbed samples (LDP: 0.2 for MNIST-like data, 0.5 CIFAR-10)
      eta=1.0,  # ||r||_2 <= eta, the worst-case perturbation (Eq. 3)
      pgd_steps=3,  # projected gradient ascent steps for r
      robust_teachers=robust_teachers,  # teacher ensembles trained with Eq. 3
      num_steps=1500,  # the single robust teacher's schedule (configs/ldp.py)
      batch_size=128,
      learning_rate=1e-3,
      end_learning_rate=0.0,
  ))


def audit_config() -> ml_collections.ConfigDict:
  """The privacy audit's attacks (``python -m dgd_jax.audit``)."""
  return ml_collections.ConfigDict(dict(
      splits=10,  # balanced member/non-member splits (teachers: one teacher per split)
      examples=1000,  # members and non-members per split, at most
      prior="auto",  # model inversion: 'generator' (the data-free one), 'pixel' or 'auto'
      inversion_steps=300,  # Adam steps of gradient ascent on log p(class | x)
      inversion_batch=16,  # reconstructions per class, averaged for the picture and score
      # > 0: one more run of the method with this many canaries, each in the private set with
      # probability 1/2, and its one-run epsilon lower bound (audit.canaries); DP-SGD only
      canaries=0,
  ))
