"""Config files: each defines ``get_config(arg)``; ``arg`` is '<dataset>[,<preset>...]'."""
