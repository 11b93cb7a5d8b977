"""Tests of the ACP bridge and attach."""
