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
