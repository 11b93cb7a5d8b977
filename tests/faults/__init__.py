"""The fault suite: real nodes, a real Redis, a TCP proxy between them, and a checker."""
