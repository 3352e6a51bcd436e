"""The sweep command: search space × ablation arms → Ray Tune → results table,
chart, best models (``hlgt.commands.sweep``, also the entry point ``hlgt-sweep``; ``--help`` lists
its options).

    python tune/sweep.py --ablation no_line_graph --smoke-test
    python tune/sweep.py --dataset mawps --mawps-folds graph2tree-1921 --no-mawps-valid --ablation all \
        --folds 0,1,2,3,4 --set data.min_word_freq=5 --name paper-tables
"""
from hlgt.commands.sweep import run

if __name__ == "__main__":
    run()
