"""The parts of ``benchmarks/gpu_check.py``, one job each: inputs (:mod:`.data`), the cases
parity covers (:mod:`.cases`), the device side and stage timing (:mod:`.device`),
comparisons (:mod:`.compare`), and one module per section of the run (:mod:`.environment`,
:mod:`.parity`, :mod:`.throughput`, :mod:`.anchors`, :mod:`.cluster`, :mod:`.report`).
"""
