"""Tests of the burst provider service and its providers."""
