"""Artifacts: what goes into one, how it is stored and served, how it is fetched.

The source-controller builds artifacts (`ignoring`, `archiving`), keeps them
(`storage`) and serves them (`serving`); every other controller downloads,
verifies and unpacks them (`fetching`). Nothing here knows about Kubernetes
objects: callers pass kinds, names, paths and digests.
"""
