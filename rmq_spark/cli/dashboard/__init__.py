"""``rmq-spark dashboard``: a web view of a store (topics, queues, consumer groups and lag,
the jobs' progress, messages paged by queue offset or time, dead letters, traffic). It reads
the store read-only; its one write, re-sending a dead letter, goes through a running broker.
``params.py`` checks the URL, ``data.py``, ``lookup.py`` and ``dlq.py`` gather, ``chart.py``
draws, ``app.py`` and ``dlq_pages.py`` serve."""
