"""The sweep command: ``python tune/sweep.py --ablation no_line_graph --smoke-test``.

A thin entry point; the search space, arms, Tune experiments, selection on validation, the test
evaluation of each arm's best configuration, the results table and chart live in
``hlgt/train/sweep.py`` (``python tune/sweep.py --help`` lists the options).
"""
import sys

from hlgt.train.sweep import main

if __name__ == "__main__":
    sys.exit(main())
