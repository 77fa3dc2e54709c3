"""Deterministic simulation of the replication core (see sim.py)."""
