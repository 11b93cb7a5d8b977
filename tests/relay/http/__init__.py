"""Tests of the master relay's HTTP API."""
