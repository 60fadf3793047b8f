"""Gibbs sampling with conditionals derived by the rewrite engine.

* :mod:`~factorflow.samplers.densities` — the built-in factors' log densities as terms;
* :mod:`~factorflow.samplers.sites` — a model's log density as sites and accesses;
* :mod:`~factorflow.samplers.families` — conjugate families: statistics and draws;
* :mod:`~factorflow.samplers.conditionals` — each variable's full conditional, derived;
* :mod:`~factorflow.samplers.linear` — joint Gaussian draws of coupled real and vector
  variables (regression coefficients);
* :mod:`~factorflow.samplers.gibbs` — the compiled sampler (``model.compile("gibbs")``);
* :mod:`~factorflow.samplers.result` — draws, summaries and ArviZ.
"""
