"""Pure detectors: each reads a DataFlowGraph and returns frozen report facts."""
