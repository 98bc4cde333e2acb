"""Running methods: the method registry (``methods``), one run (``pipeline``), a grid of runs
(``sweep``) and the run's report (``report``)."""
