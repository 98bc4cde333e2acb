"""Pipeline stages. Each is a ``StageSpec``: the config keys it depends on, and a function
``run(ctx) -> result dict`` that trains/evaluates and returns JSON-able outputs."""
