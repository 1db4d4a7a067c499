"""The end-to-end demo (``rmq-spark demo``, ``make run``): traffic, jobs, status, report."""
