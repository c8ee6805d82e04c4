"""Safe checkpoint loading: format sniffing, static pickle inspection, model materialisation.

The entry points (the CLI, :func:`auditor.scan`, each audit of a batch) put the Hugging Face
libraries offline for the whole process first (:func:`auditor.load.offline.force_offline`).
"""
