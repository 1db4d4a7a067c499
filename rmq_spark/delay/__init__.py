"""Delay-level and timer redelivery."""
