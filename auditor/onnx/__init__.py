"""ONNX models: profile the graph, check it with onnxruntime, export split heads.

The modules of this package import ``onnx``/``onnxruntime`` (the ``auditor[onnx]`` extra); call
:func:`auditor.deps.require` before importing them so a missing package is a one-line input error.
"""
