"""Stand-in for GE's private ``ge._capi`` package (tests only)."""
