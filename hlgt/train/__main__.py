"""python -m hlgt.train: the command hlgt-train (``hlgt.commands.train``)."""

if __name__ == "__main__":
    from hlgt.commands.train import run

    run()
