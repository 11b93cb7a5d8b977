"""The RAWP test suite."""
