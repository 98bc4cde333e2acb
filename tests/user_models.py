"""A researcher's own Flax models, not the package's classifier: imported by the API tests and
named on the command line (``--config.model.module=user_models:UserMLP``)."""
import flax.linen as nn


class UserMLP(nn.Module):
  num_classes: int = 10
  features: int = 32

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(self.features)(x.reshape((x.shape[0], -1))))
    return nn.Dense(self.num_classes)(x)


class UserCNN(nn.Module):
  num_classes: int = 10

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(8, (3, 3), strides=2)(x))
    return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))


class UserBatchNormCNN(nn.Module):
  """A CNN as researchers write them: BatchNorm and Dropout, switched by ``train``."""
  num_classes: int = 10
  rate: float = 0.3

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = nn.Conv(8, (3, 3))(x)
    x = nn.relu(nn.BatchNorm(use_running_average=not train)(x))
    x = nn.max_pool(x, (2, 2), (2, 2)).reshape((x.shape[0], -1))
    x = nn.Dropout(self.rate, deterministic=not train)(nn.relu(nn.Dense(32)(x)))
    return nn.Dense(self.num_classes)(x)


class UserStatefulMLP(nn.Module):
  """Keeps a variable outside its parameters, which the train steps would not update."""
  num_classes: int = 10

  @nn.compact
  def __call__(self, x):
    calls = self.variable("counters", "calls", lambda: 0)
    calls.value += 1
    return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))
