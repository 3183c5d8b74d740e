"""Several `satsgate serve` instances on one store and one node (docs/scale.md):
each instance's presence and lease, the recovery of a gone instance's work, duties that
run on one instance at a time, and events that reach every instance."""
