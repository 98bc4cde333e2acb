"""Config-free synthetic data: the generator's and VAE's steps (``generative``), DPDFD's
Algorithm 1 step (``dpdfd``) and the VAE triples of DGD's student (``triples``)."""
