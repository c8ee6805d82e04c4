"""Graph profile: tracing, a normalised data-flow graph, and pure detectors over it."""
