"""Layer 4 (docs/design.md §8): partition tasks, the one global logID offset pass, per-worker
state (a distributed WorkerPlugin), and connecting to a cluster."""
