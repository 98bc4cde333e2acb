"""From a config to what runs: the stage ``Context`` (``context``), each method's plan, checks
and release records (``queries`` for DGD's and PATE's label queries, ``dpsgd``, ``dpdfd``,
``ldp``), the models and artefacts a config names (``artefacts``), the student's pool
(``pool``) and fit (``student_fit``)."""
