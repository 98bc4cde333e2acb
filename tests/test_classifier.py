"""The paper classifier: im2col convolution equals lax.conv, shapes, parameter counts."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgd_jax.models.classifier import Classifier, Conv3x3, max_pool_2x2


def num_params(params) -> int:
  return sum(x.size for x in jax.tree.leaves(params))


def test_conv3x3_equals_lax_conv():
  x = jax.random.normal(jax.random.key(0), (2, 7, 5, 3))
  conv = Conv3x3(4)
  params = conv.init(jax.random.key(1), x)
  p = params["params"]
  expected = jax.lax.conv_general_dilated(
      x, p["kernel"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["bias"]
  np.testing.assert_allclose(conv.apply(params, x), expected, rtol=1e-5, atol=1e-5)


def test_max_pool_2x2():
  x = jnp.arange(2 * 5 * 4 * 1, dtype=jnp.float32).reshape(2, 5, 4, 1)
  out = max_pool_2x2(x)
  assert out.shape == (2, 2, 2, 1)
  expected = jax.lax.reduce_window(x[:, :4], -jnp.inf, jax.lax.max, (1, 2, 2, 1),
                                   (1, 2, 2, 1), "VALID")
  np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("image_shape, hidden, width, expected_params", [
    # conv1 3*3*1*64+64, conv2 3*3*64*128+128, head 7*7*128*10+10
    ((28, 28, 1), (), 1.0, 640 + 73856 + 62730),
    # width 0.25: 16 and 32 channels
    ((28, 28, 1), (), 0.25, (9 * 16 + 16) + (9 * 16 * 32 + 32) + (7 * 7 * 32 * 10 + 10)),
    # SVHN variant: FC 384 and 192 after 8*8*128 features
    ((32, 32, 3), (384, 192), 1.0,
     (9 * 3 * 64 + 64) + 73856 + (8 * 8 * 128 * 384 + 384) + (384 * 192 + 192) + 1930),
])
@pytest.mark.integration  # over 4 s on a slow host from an empty JAX cache
def test_classifier_shapes_and_params(image_shape, hidden, width, expected_params):
  model = Classifier(num_classes=10, width=width, hidden=hidden)
  x = jnp.zeros((3,) + image_shape)
  params = model.init(jax.random.key(0), x)
  assert num_params(params) == expected_params
  logits, features = model.apply(params, x, with_features=True)
  assert logits.shape == (3, 10)
  c2 = round(128 * width)
  side = image_shape[0] // 4
  assert features.shape == (3, hidden[-1] if hidden else side * side * c2)
  np.testing.assert_allclose(model.apply(params, x), logits)
  np.testing.assert_allclose(model.apply(params, x, method=Classifier.backbone), features)


@pytest.mark.integration
def test_both_lowerings_share_parameters_and_compute_the_same_function():
  """'conv' (lax.conv, for models never vmapped) and 'im2col' read the same parameters and give
  the same logits and input gradients, so a stage may load a checkpoint under either."""
  x = jax.random.normal(jax.random.key(0), (5, 28, 28, 1))
  im2col = Classifier(num_classes=10, width=0.25)
  conv = Classifier(num_classes=10, width=0.25, lowering="conv")
  params = im2col.init(jax.random.key(1), x)
  assert (jax.tree.structure(conv.init(jax.random.key(1), x))
          == jax.tree.structure(params))
  np.testing.assert_allclose(conv.apply(params, x), im2col.apply(params, x),
                             rtol=1e-5, atol=1e-5)
  grad = lambda m: jax.grad(lambda v: m.apply(params, v).sum())(x)
  np.testing.assert_allclose(grad(conv), grad(im2col), rtol=1e-4, atol=1e-5)
  single = conv.apply(params, x[0])  # one image, no batch axis, as im2col allows
  np.testing.assert_allclose(single, im2col.apply(params, x[0]), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="lowering='winograd'"):
    Classifier(num_classes=10, width=0.25, lowering="winograd").init(jax.random.key(1), x)
