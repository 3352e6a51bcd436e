"""python -m hlgt.train: the command hlgt-train (``hlgt.commands.train``)."""
from hlgt.commands.train import run

run()
