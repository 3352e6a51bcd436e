"""The sweep: search space × ablation arms → Ray Tune → results table, chart, best models.

The command is ``tune/sweep.py``; this package is what it drives, installed so that Ray's workers
import the trial function:

- ``space``: the search space (values from the command line or YAML), its samples, their names;
- ``spec``: ``SweepSpec``, everything a trial needs, decided before Ray starts;
- ``experiments``: the trial function and one Tune experiment per arm, then ``run`` (the whole sweep);
- ``results``: selection on validation, one test evaluation per arm, the table, chart and W&B summary;
- ``tables``: the paper's Tables 2-4 from the test predictions, with paired counts and McNemar's p
  (by problem where replicates share test problems).
"""
