"""Tests of the protocol package: frames, codec, buffers, schemas, the validate command."""
