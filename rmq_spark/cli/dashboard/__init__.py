"""``rmq-spark dashboard``: a read-only web view of a store (topics, queues, consumer groups
and lag, the jobs' progress, message lookup, traffic). ``data.py`` and ``lookup.py`` gather,
``chart.py`` draws, ``app.py`` serves."""
