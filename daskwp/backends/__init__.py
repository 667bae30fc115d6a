"""Layer 2 (docs/design.md §8): the backends (CPU extension, CUDA launcher, pure-Python
reference) behind one small protocol, the host memory pool, and the single-machine
tokenizer over them."""
