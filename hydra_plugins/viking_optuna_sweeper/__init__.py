"""viking_optuna: a Hydra sweeper that runs an Optuna study through Optuna's ask/tell API.

Select it with ``defaults: [override /hydra/sweeper: viking_optuna]`` (see conf/hparams_search/).
Hydra finds it because ``hydra_plugins`` is a namespace package: there is no
``hydra_plugins/__init__.py``, and there must never be one.
"""
