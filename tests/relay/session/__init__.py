"""Tests of one session and its parts (relay/session/)."""
