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


class UserBatchNormMLP(nn.Module):
  """Keeps BatchNorm's running statistics, which the train steps would not update."""
  num_classes: int = 10

  @nn.compact
  def __call__(self, x):
    x = nn.BatchNorm(use_running_average=False)(x.reshape((x.shape[0], -1)))
    return nn.Dense(self.num_classes)(x)
