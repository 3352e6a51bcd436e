"""Training and what measures it: ``loop`` (the one training loop, in process or on each Ray Train
worker), ``step``, ``checkpoint``, ``run`` (a run's folder), ``launch`` (Ray Train), ``cuda_graphs``,
``tracking`` (W&B), ``evaluate`` (accuracies and predictions), ``compare`` (two models paired on the
same problems), ``curve`` and ``bench`` (learning curves and speed).
"""
