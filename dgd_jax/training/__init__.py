"""Config-free training: the pure train step and loop (``train``), the teacher ensemble lifted
over a teacher axis (``ensemble``, ``placement``, ``memory_plan``), augmentations, DP-SGD
through jax-privacy (``dpsgd``) and LDP's client transform and robust training (``ldp``)."""
