"""Several ``rawp serve`` processes on one Redis: crash recovery, takeovers, Redis faults."""
