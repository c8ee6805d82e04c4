"""The drivers: one checkpoint from path to report (:mod:`.pipeline`), refusals before loading
(:mod:`.refused`), the example input (:mod:`.inputs`), report assembly (:mod:`.assemble`), ONNX graphs
(:mod:`.onnx`) and runs over many paths (:mod:`.batch`)."""
