"""Transactions: half messages, commit and rollback through op records, the check
service, and the transactional producer of the Python API."""
