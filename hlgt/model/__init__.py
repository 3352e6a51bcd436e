"""The model, ``Batch`` → loss or equations, on whatever device its tensors are on (it touches no
Ray, W&B or device choice): ``encoder`` (embeddings, BiGRUs in ``gru``, the graph layers of
``hlgt_conv``, fusion), ``tree_decoder`` (GTS's goal-driven decoder, ``tree_layout`` for teacher
forcing, ``beams`` for the beam search), ``comparison`` (the numerical-comparison task), and
``solver``, which joins them; ``plan`` is what a step reads besides the batch.
"""
