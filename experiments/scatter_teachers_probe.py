r"""Do ScatterNet teachers label DGD's synthetic pool better than the CNN teachers?

Question: at 8,000 images the noiseless-label student stays under 79% while the teachers'
plurality reaches 81%: the pool binds. Would teachers on a fixed feature map (ScatterNet +
linear, Tramer & Boneh 2021; strong on little data) give labels on the synthetic pool that teach
a student more about real images?
Answer: no. 100 ScatterNet-linear teachers of 80 images (600 steps, lr 0.01) reach a
plurality of 81.27% on the real test set against the CNN teachers' 80.29%, but on 3,000 of
the run's synthetic samples their plurality agrees with the CNNs' on 50.9% only, and a width-0.5
student on those labels scores 72.76% on real images against 76.59% with the CNN teachers'
labels: samples inverted from a CNN baseline are read best by CNN teachers.
Feeds: RESULTS.md, "DGD's plan for the data a user has (teachers, queries, release)".

A development diagnostic, not a release: it reads the teachers without noise.

  python experiments/scatter_teachers_probe.py <a finished npz DGD run> [num_samples]
      [linear|cnn] [learning_rate]
"""

import os, sys, tempfile, time
import flax.linen as nn
import jax, jax.numpy as jnp
import numpy as np
import dgd_jax
from dgd_jax.models import scattering
from dgd_jax.models.dpsgd import ScatterLinear, ScatterCNN
from dgd_jax.training import train

WORKDIR, NUM = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3000
HEAD = sys.argv[3] if len(sys.argv) > 3 else "linear"


class ScatterTeacher(nn.Module):
  num_classes: int = 10
  head: str = "linear"

  @nn.compact
  def __call__(self, x):
    f = scattering.scatter(x, 2, 8)
    return (ScatterLinear if self.head == "linear" else ScatterCNN)(self.num_classes)(f)


run = dgd_jax.open_run(WORKDIR, "generator")
data, config = run.data, run.config
raw = np.load(config.dataset.split(":", 1)[1])
xtr, ytr = raw["x_train"], raw["y_train"]
n = config.num_teachers
pix = lambda x: np.clip((np.asarray(x) + 1.0) * 127.5, 0, 255)
x_syn = run.synthetic()[:NUM]
STUDENT = train.FitConfig(num_steps=500, batch_size=128, learning_rate=1e-3)
model = run.new_classifier(width=0.5)
folder = tempfile.mkdtemp()


def real_accuracy(x, y, name):
  state = train.create_train_state(model, train.optimizer(STUDENT), jax.random.key(0),
                                   data.image_shape)
  state = train.fit(state, x, y, jax.random.key(7), STUDENT, os.path.join(folder, name), name)
  return train.accuracy(model.apply, state.params, data.x_test, data.y_test)


cnn_votes = run.votes(x_syn)
cnn_test = run.votes(data.x_test)
print(f"CNN teachers: plurality on test {np.mean(cnn_test.argmax(1) == data.y_test):.4f}",
      flush=True)
print(f"  synthetic -> real, CNN plurality labels: "
      f"{real_accuracy(x_syn, cnn_votes.argmax(1).astype(np.int32), 'cnn'):.4f}", flush=True)
t = time.time()
steps = config.teachers.num_steps
teachers = dgd_jax.train_teachers(ScatterTeacher(num_classes=10, head=HEAD), xtr, ytr, n,
                                  num_steps=steps, batch_size=config.teachers.batch_size,
                                  learning_rate=float(sys.argv[4]) if len(sys.argv) > 4 else 1e-2,
                                  seed=config.seed)
print(f"scatter teachers trained in {time.time() - t:.0f} s ({steps} steps)", flush=True)
sc_test = dgd_jax.teacher_votes(teachers, pix(data.x_test))
sc_votes = dgd_jax.teacher_votes(teachers, pix(x_syn))
print(f"scatter-{HEAD} teachers: plurality on test {np.mean(sc_test.argmax(1) == data.y_test):.4f}, "
      f"top share on synthetic {sc_votes.max(1).mean() / n:.3f} (CNN {cnn_votes.max(1).mean() / n:.3f}), "
      f"agree with CNN plurality {np.mean(sc_votes.argmax(1) == cnn_votes.argmax(1)):.3f}", flush=True)
print(f"  synthetic -> real, scatter plurality labels: "
      f"{real_accuracy(x_syn, sc_votes.argmax(1).astype(np.int32), 'sc'):.4f}", flush=True)
