"""docs/ARCHITECTURE.md names only what exists: every path, module attribute and test it
quotes (in backticks) is checked against the tree."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import pathlib
import pkgutil
import re

import dgd_jax

REPO = pathlib.Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "ARCHITECTURE.md"
_PATH = re.compile(r"^[\w./-]+(\.py|/)$")
_ATTR = re.compile(r"^([\w/]+(?:\.\w+)*)\.(\w+)(\(.*\))?$")


class Names:
  """A command module's top-level names, read from its source: importing a command beside
  another (or beside a test that did) would define their absl flags twice."""

  def __init__(self, name: str):
    tree = ast.parse(pathlib.Path(importlib.util.find_spec(name).origin).read_text())
    for node in tree.body:
      targets = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                 [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)])
      for target in targets:
        setattr(self, target, True)


def modules() -> dict[str, list]:
  """Every dgd_jax module by its last name (and its dotted tails): 'pipeline' -> [module]."""
  out: dict[str, list] = {}
  for info in pkgutil.walk_packages(dgd_jax.__path__, "dgd_jax."):
    if info.name.endswith("__main__"):
      continue
    source = pathlib.Path(importlib.util.find_spec(info.name).origin).read_text()
    command = "flags.DEFINE" in source  # a command: its flags are defined once per process
    module = Names(info.name) if command else importlib.import_module(info.name)
    parts = info.name.split(".")[1:]
    for i in range(len(parts)):
      out.setdefault(".".join(parts[i:]), []).append(module)
  return out


def has(owner, name: str) -> bool:
  if hasattr(owner, name):
    return True
  return dataclasses.is_dataclass(owner) and name in {f.name for f in dataclasses.fields(owner)}


def quoted(text: str) -> list[str]:
  return sorted(set(re.findall(r"`([^`\n]+)`", text)))


def absent(text: str, found: dict) -> list[str]:
  """The names quoted in ``text`` that the tree does not have."""
  classes = {name: getattr(m, name) for ms in found.values() for m in ms for name in dir(m)
             if isinstance(getattr(m, name, None), type)}
  tests = "\n".join(p.read_text() for p in (REPO / "tests").glob("*.py"))
  missing = []
  for span in quoted(text):
    if any(c in span for c in "<>*… ") or "..." in span:
      continue  # a pattern or a code fragment, not a name
    if _PATH.match(span):
      if not any((root / span).exists() for root in (REPO, REPO / "dgd_jax")):
        missing.append(span)
      continue
    if span.startswith("test_") and span.isidentifier():
      if f"def {span}(" not in tests:
        missing.append(span)
      continue
    m = _ATTR.match(span)
    if not m or m.group(1).startswith(("config", "jax", "lax", "python")):
      continue
    owner, name = m.group(1).replace("/", "."), m.group(2)
    candidates = found.get(owner, []) + ([classes[owner]] if owner in classes else [])
    if candidates and not any(has(c, name) for c in candidates):
      missing.append(span)
    elif not candidates and owner[0].isupper():
      missing.append(span)  # a class the package does not have
  return missing


def test_every_path_module_attribute_and_test_the_architecture_names_exists():
  missing = absent(DOC.read_text(), modules())
  assert not missing, f"docs/ARCHITECTURE.md names what does not exist: {missing}"


def test_the_check_finds_a_name_that_is_not_there():
  text = ("`pipeline.run` `plan/workdir.py` `runtime/workdir.py` `pipeline.no_such_thing` "
          "`Workdir.read_config` `Workdir.nothing` `test_no_such_test`")
  assert absent(text, modules()) == ["Workdir.nothing", "pipeline.no_such_thing",
                                      "plan/workdir.py", "test_no_such_test"]
