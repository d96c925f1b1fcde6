"""OCI artifacts in Flux's layout: what one is (`artifacts`) and the registry client (`registry`).

The source-controller pulls them for an OCIRepository; `sluice push|pull|tag
artifact` and `sluice list|diff artifacts` produce and inspect them in CI.
Both sides share this package so that what one writes the other reads.
"""
