"""The rmq-spark command line."""
