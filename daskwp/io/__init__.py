"""Layer 5 (docs/design.md §8): reading tokenized datasets back (``read_tokenized``)."""
