"""The data path, from a benchmark's files to the model's batches: ``problems`` (files → records),
``splits`` and ``clean`` (which problems a split keeps), ``text`` and ``numbers`` (tokens and
quantity slots), ``srl`` (annotators), ``graph`` (the heterogeneous graph and its line graph),
``annotate`` and ``build`` (Parquet shards, with Ray Data), ``schema``, ``shards`` and ``vocab``
(reading them back), ``collate`` (rows → ``Batch``); ``report`` and ``vectors`` beside the path.
"""
