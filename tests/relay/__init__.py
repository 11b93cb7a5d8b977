"""Tests of the master relay."""
