"""The transaction check-back as a job (``rmq-spark txcheck``, ``jobs/txcheck.py``;
docs/TRANSACTIONS.md, "Running the check as a job").

``halves.py`` finds the halves from the job's progress on, from the store files or with Spark;
``client.py`` asks the broker to act on the due ones (``StoreService.CheckTransaction``);
``job.py`` plans each pass with the broker's rule (``broker/transactions/check_plan.py``),
keeps the progress and runs once or continuously.
"""
