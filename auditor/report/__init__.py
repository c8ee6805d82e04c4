"""Report data model and renderers (JSON, HTML, SARIF)."""
