"""The run's surroundings: workdir and artefact files (``workdir``), multi-process runs
(``distributed``), host settings (``host``), logging (``progress``), TensorBoard and plots,
and the errors a user sees (``errors``)."""
