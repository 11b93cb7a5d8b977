"""Tests of the master relay's stores."""
