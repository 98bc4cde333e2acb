"""Config-free labels from teachers: vote aggregation (``aggregation``) and few-label learning
over an unlabelled pool (``propagation``)."""
