"""Pipeline stages. Each module defines ``CONFIG_KEYS`` (the config blocks the stage itself
reads; ``methods.config_keys`` adds the base keys and its inputs' slices) and ``run(ctx) ->
dict`` (JSON-able outputs); ``methods.STAGES`` registers them. Stages read earlier stages'
artefacts through ``dgd_jax.plan.artefacts`` and never import each other or the pipeline."""
