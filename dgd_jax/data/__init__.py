"""Data: offline TFDS builders, bring-your-own IDX/npz loaders, teacher partitions."""
from dgd_jax.data.loaders import BUILT_IN, Dataset, load_dataset, load_private
from dgd_jax.runtime.errors import DatasetError
from dgd_jax.data.partitions import (config_shards, partition_indices, teacher_partitions,
                                     teacher_shards)

__all__ = ["BUILT_IN", "Dataset", "DatasetError", "config_shards", "load_dataset",
           "load_private", "partition_indices", "teacher_partitions", "teacher_shards"]
