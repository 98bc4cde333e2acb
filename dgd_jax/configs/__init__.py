"""Config files: each defines ``get_config(arg)`` and the ``GRAMMAR`` its argument follows,
'<dataset>[,<preset>][,<choice>...][,<flag>...]' (``common.parse_arg``)."""
